#pragma once
// SLUICE_GUARDED_BY(m): the member is read and written only with mutex `m` held. It
// says so where the member is declared; clang's -Wthread-safety could check it with an
// annotated mutex type, GCC (our compiler) ignores it: the ThreadSanitizer build of the
// suite is what checks the threading.
#if defined(__clang__)
#define SLUICE_GUARDED_BY(mutex) __attribute__((guarded_by(mutex)))
#else
#define SLUICE_GUARDED_BY(mutex)
#endif
