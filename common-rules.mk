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
