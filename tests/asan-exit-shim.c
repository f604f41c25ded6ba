/* nbdstack tests: keep ASan-preloaded nbdkit from hanging on exit.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * In sanitizer builds the test harness preloads libasan into nbdkit.
 * With it preloaded, nbdkit 1.32 deadlocks whenever it exits with an
 * error: p11-kit's destructor (pulled in through GnuTLS) calls
 * freelocale(), which waits forever on glibc's setlocale lock.  ASan's
 * authors do not support preloading, so rather than chase glibc
 * internals the test harness also preloads this: freelocale does
 * nothing, leaking a locale object in a test process that is exiting.
 * Never used outside the sanitizer test runs.
 */
#include <locale.h>

void
freelocale (locale_t locale)
{
  (void)locale;
}
