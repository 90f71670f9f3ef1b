// Times two builds of bench/ab/probe.cpp (an old and a new version of the library) in one
// process, alternating which goes first each round, and prints the median new/old ratio
// of each path with its range. Usage: side_by_side OLD.so NEW.so [ROUNDS]
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using probe = double (*)(long);

struct version {
  probe posts;
  probe locks;
};

version load(const char* path) {
  // RTLD_LOCAL: each version keeps its own copy of every symbol and thread-local.
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "side_by_side: %s\n", dlerror());
    std::exit(1);
  }
  return {reinterpret_cast<probe>(dlsym(h, "ab_posts_ns")), reinterpret_cast<probe>(dlsym(h, "ab_locks_ns"))};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: side_by_side OLD.so NEW.so [ROUNDS]\n");
    return 2;
  }
  const version old_v = load(argv[1]);
  const version new_v = load(argv[2]);
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 21;
  constexpr long posts = 5'000'000;
  constexpr long locks = 1'000'000;
  old_v.posts(posts / 5);  // warm-up: pools, caches, the keyed table
  new_v.posts(posts / 5);
  old_v.locks(locks / 5);
  new_v.locks(locks / 5);
  std::vector<double> post_ratio;
  std::vector<double> lock_ratio;
  for (int r = 0; r < rounds; ++r) {
    const bool old_first = r % 2 == 1;
    double po = 0, pn = 0, lo = 0, ln = 0;
    if (old_first) po = old_v.posts(posts);
    pn = new_v.posts(posts);
    if (!old_first) po = old_v.posts(posts);
    if (old_first) lo = old_v.locks(locks);
    ln = new_v.locks(locks);
    if (!old_first) lo = old_v.locks(locks);
    post_ratio.push_back(pn / po);
    lock_ratio.push_back(ln / lo);
    std::printf("round %2d  post old %6.2f new %6.2f ns   lock+unlock old %6.2f new %6.2f ns\n", r, po, pn, lo, ln);
  }
  const auto [pmin, pmax] = std::minmax_element(post_ratio.begin(), post_ratio.end());
  const auto [lmin, lmax] = std::minmax_element(lock_ratio.begin(), lock_ratio.end());
  std::printf("new/old, median of %d rounds: post %.3f (%.3f-%.3f), lock+unlock %.3f (%.3f-%.3f)\n", rounds,
              median(post_ratio), *pmin, *pmax, median(lock_ratio), *lmin, *lmax);
}
