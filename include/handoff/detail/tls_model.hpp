// HANDOFF_TLS_MODEL: the TLS model of the library's per-thread state (the run queue, the
// node pool's slabs, the keyed mutex's entry cache).
//
// initial-exec: a direct %fs-relative access even from the -fPIC library (the default
// model there calls __tls_get_addr on every access). The state is a few words, well within
// the static TLS space glibc reserves for libraries loaded with dlopen.
#pragma once

#if defined(__GNUC__)
#define HANDOFF_TLS_MODEL [[gnu::tls_model("initial-exec")]]
#else
#define HANDOFF_TLS_MODEL
#endif
