# The parameter-documentation test: every entry of every component's
# parameter list (<component>-params.h, common/param-table.h) is named
# in that component's man page and README synopsis, and nbdstack-nbd's
# --help lists every PARAM_SETTING one.
PARAMS_TESTS = test-build-params.sh
TESTS += $(PARAMS_TESTS)
EXTRA_DIST += $(PARAMS_TESTS)

# The lists are included by their path from the top of the tree.
check_PROGRAMS += params-list
params_list_SOURCES = params-list.c
params_list_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
