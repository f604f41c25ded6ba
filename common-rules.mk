## Rules shared by the Makefile.am of every component that ships a man
## page, the way nbdkit shares its common-rules.mk.  Include it with
##
##     POD_MAN1 = nbdkit-foo-filter
##     include $(top_srcdir)/common-rules.mk
##
## POD_MAN1 names the section-1 pages of the directory (FOO.pod, without
## the .pod).  The .pod files are distributed; when configure found
## pod2man each is rendered into FOO.1, installed into man1dir and removed
## by make clean.  A Makefile.am adds more to EXTRA_DIST or CLEANFILES
## with += after the include.
##
## It also defines install-data-hook and uninstall-hook (below: no .la
## in nbdkit's directories), so a Makefile.am that includes it must not.
## SPDX-License-Identifier: BSD-3-Clause

EXTRA_DIST = $(POD_MAN1:=.pod)
CLEANFILES =

if HAVE_POD2MAN
man1_MANS = $(POD_MAN1:=.1)
CLEANFILES += $(man1_MANS)
endif

SUFFIXES = .pod .1
.pod.1:
	$(AM_V_GEN)$(POD2MAN) --section=1 --center="nbdstack" \
	  --release="nbdstack $(VERSION)" --name=$* \
	  --utf8 $< >$@-t && mv $@-t $@

## nbdkit loads only the .so from its plugindir and filterdir, and
## ld.so only the .so of a preload library (preloaddir); like nbdkit's
## own packaging, leave no libtool .la there.  libtool's uninstall then
## has no .la to read, so remove the .so ourselves.
install-data-hook:
	@list='$(plugin_LTLIBRARIES)'; for la in $$list; do \
	  echo " rm -f '$(DESTDIR)$(plugindir)/$$la'"; \
	  rm -f "$(DESTDIR)$(plugindir)/$$la"; \
	done; \
	list='$(filter_LTLIBRARIES)'; for la in $$list; do \
	  echo " rm -f '$(DESTDIR)$(filterdir)/$$la'"; \
	  rm -f "$(DESTDIR)$(filterdir)/$$la"; \
	done; \
	list='$(preload_LTLIBRARIES)'; for la in $$list; do \
	  echo " rm -f '$(DESTDIR)$(preloaddir)/$$la'"; \
	  rm -f "$(DESTDIR)$(preloaddir)/$$la"; \
	done

uninstall-hook:
	@list='$(plugin_LTLIBRARIES)'; for la in $$list; do \
	  so="$(DESTDIR)$(plugindir)/`basename $$la .la`.so"; \
	  echo " rm -f '$$so'"; rm -f "$$so"; \
	done; \
	list='$(filter_LTLIBRARIES)'; for la in $$list; do \
	  so="$(DESTDIR)$(filterdir)/`basename $$la .la`.so"; \
	  echo " rm -f '$$so'"; rm -f "$$so"; \
	done; \
	list='$(preload_LTLIBRARIES)'; for la in $$list; do \
	  so="$(DESTDIR)$(preloaddir)/`basename $$la .la`.so"; \
	  echo " rm -f '$$so'"; rm -f "$$so"; \
	done
