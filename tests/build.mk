# Tests of the build itself: make install / make uninstall, and the
# sources formatted as .clang-format says.
BUILD_TESTS = test-build-install.sh test-build-format.sh
TESTS += $(BUILD_TESTS)
EXTRA_DIST += $(BUILD_TESTS)

# Where make install puts things (expanded by make), for
# test-build-install.sh; POD2MAN says whether there are man pages.
AM_TESTS_ENVIRONMENT += \
	install_plugindir='$(plugindir)'; export install_plugindir; \
	install_filterdir='$(filterdir)'; export install_filterdir; \
	install_bindir='$(bindir)'; export install_bindir; \
	install_pkglibdir='$(pkglibdir)'; export install_pkglibdir; \
	install_man1dir='$(mandir)/man1'; export install_man1dir; \
	POD2MAN='$(POD2MAN)'; export POD2MAN;
