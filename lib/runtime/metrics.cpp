// The process-wide metrics sink (handoff/metrics.hpp).
#include "handoff/metrics.hpp"

#include <atomic>

namespace handoff {

namespace {
// release in set_metrics_sink; pairs with the acquire in global_metrics_sink(): a reporter
// that sees the pointer sees the sink fully constructed.
std::atomic<metrics_sink*> global_sink{nullptr};
}  // namespace

void set_metrics_sink(metrics_sink* sink) noexcept { global_sink.store(sink, std::memory_order_release); }

metrics_sink* global_metrics_sink() noexcept { return global_sink.load(std::memory_order_acquire); }

}  // namespace handoff
