/* nbdstack: identifiers that no other expansion of a macro can reuse.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Macros that declare locals (MIN, ROUND_UP ...) name them with this,
 * so that nesting them (MIN (MIN (a, b), c)) or passing them a caller's
 * variable of the same name neither shadows nor captures anything.
 * __COUNTER__ rather than __LINE__: two expansions on one line differ.
 */
#ifndef NBDSTACK_UNIQUE_NAME_H
#define NBDSTACK_UNIQUE_NAME_H

#define UNIQUE_NAME(name) UNIQUE_NAME_1 (name, __COUNTER__)
/* Two levels, so that __COUNTER__ is expanded before it is pasted. */
#define UNIQUE_NAME_1(name, counter) UNIQUE_NAME_2 (name, counter)
#define UNIQUE_NAME_2(name, counter) name##counter

#endif /* NBDSTACK_UNIQUE_NAME_H */
