# Thin wrapper over Meson/Ninja: `make` builds into build/, `make check` runs every test,
# `make asan-check` runs the unit and integration tests under ASan+UBSan (build-asan/),
# `make tsan-check` runs the unit tests and the multi-threaded integration tests under
# ThreadSanitizer (build-tsan/), `make fuzz` builds the libFuzzer harnesses with clang and runs each briefly (build-fuzz/),
# `make format-check` checks every C file against .clang-format, `make interop` runs the
# Linux kernel initiator against linerate-target in a qemu guest (tests/interop).
# `make install` installs the programs, man pages, systemd unit, default config (kept if there)
# and example under PREFIX (default /usr/local; the config in SYSCONFDIR, default /etc), into
# DESTDIR if set: `make install DESTDIR=/tmp/stage PREFIX=/usr`. `make deb` builds the Debian
# package (debian/, dpkg-buildpackage) into ../ as Debian tools do.
MESON ?= meson
BUILD ?= build
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc

.PHONY: all check unit-check asan-check tsan-check interop fuzz torture ha clean format-check install deb

all: $(BUILD)/build.ninja
	ninja -C $(BUILD)

$(BUILD)/build.ninja:
	$(MESON) setup $(BUILD) --buildtype=release -Db_ndebug=false

check: all
	$(MESON) test -C $(BUILD) --print-errorlogs

unit-check: all
	$(MESON) test -C $(BUILD) --print-errorlogs --suite unit

build-asan/build.ninja:
	$(MESON) setup build-asan --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false

asan-check: build-asan/build.ninja
	ninja -C build-asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		$(MESON) test -C build-asan --print-errorlogs --timeout-multiplier 4

# ThreadSanitizer (gcc's libtsan). Every report fails: each process writes its reports to
# build-tsan/tsan-logs/ (log_path, so a daemon's report is caught even when its test does not
# read its stderr) and exits 66 at the first one (halt_on_error), and the check fails if that
# directory holds any report. Suppressions (third-party libraries only) in tests/tsan.supp.
# The integration tests are those with more than one thread at work: MC/S and ERL 2 across
# reactors, cross-thread aborts and range locks, the control and the metrics thread (and CHAP
# credentials a reload replaces while logins copy them: target-admin), and the short torture
# run (its target's two threads under recovery, aborts and restarts; about 30 s) with
# abort-task; live ALUA changes and host entries a reload swaps while logins read them
# (target-alua-live, target-hosts, target-hosts-live, target-entry-caps). Not the
# rbd tests: librbd is not built for ThreadSanitizer and its completion object, freed by one of
# its threads while another still waits on it, is reported in most target-rbd runs (4 of 5
# here) with no symbol to suppress but the whole library, which would also hide races in
# linerate's callbacks from it. TSAN_TESTS="target-rbd target-rbd-abort target-rbd-stall" runs
# them (about 40, 25 and 20 s).
TSAN_TESTS ?= target-abort-mcs target-erl2 bench-erl1 bench-erl2 target-abort-lands \
	target-clear-task-set target-tear target-ctl target-service target-metrics hostile \
	target-admin torture abort-task target-alua-live target-hosts \
	target-hosts-live target-entry-caps
build-tsan/build.ninja:
	$(MESON) setup build-tsan --buildtype=debug -Db_sanitize=thread -Db_lundef=false

tsan-check: build-tsan/build.ninja
	ninja -C build-tsan
	rm -rf build-tsan/tsan-logs && mkdir -p build-tsan/tsan-logs
	status=0; \
	unit=$$($(MESON) test -C build-tsan --list --suite unit 2>/dev/null | sed -n 's|^.*:unit / ||p'); \
	TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:log_path=$(CURDIR)/build-tsan/tsan-logs/tsan:suppressions=$(CURDIR)/tests/tsan.supp" \
		$(MESON) test -C build-tsan --print-errorlogs --timeout-multiplier 4 \
		$$unit $(TSAN_TESTS) || status=1; \
	for f in build-tsan/tsan-logs/*; do \
		[ -s "$$f" ] || continue; echo "==== ThreadSanitizer report $$f:"; cat "$$f"; status=1; \
	done; \
	exit $$status

# Also part of `make check` (meson suite integration); this runs it alone, its steps shown.
interop: all
	$(MESON) test -C $(BUILD) --print-errorlogs --verbose --suite interop

# The seeded recovery torture run (tests/torture/torture.c, docs/torture.md): `make torture
# SECONDS=600 SEED=S` replays seed S's schedule for that long (no SEED: a new one, printed);
# BUILD=build-asan runs it under ASan+LeakSanitizer.
SECONDS ?= 600
torture: all
	$(BUILD)/tests/torture/torture --target $(BUILD)/linerate-target \
		--lun-reset tests/torture/lun_reset.py --seconds $(SECONDS) $(if $(SEED),--seed $(SEED))

# Network partitions with the gateways, the Ceph mini cluster and the initiator in network
# namespaces (tests/ha/partition.sh, docs/ha.md; root): `make ha HA_ROUNDS=50` for the full
# run. Exits non-zero on any lost write, stale read or fenced write; 77 when it cannot run.
HA_ROUNDS ?= 2
ha: all
	HA_ROUNDS=$(HA_ROUNDS) tests/ha/partition.sh $(BUILD)
	LINERATE_TARGET=$(abspath $(BUILD))/linerate-target tests/interop/kernel_multipath.sh

# FUZZ_SECONDS=600 make fuzz for a longer run.
fuzz:
	tests/fuzz/run.sh

install: $(BUILD)/build.ninja
	$(MESON) configure $(BUILD) -Dprefix=$(PREFIX) -Dsysconfdir=$(SYSCONFDIR)
	$(MESON) install -C $(BUILD) $(if $(DESTDIR),--destdir $(DESTDIR))

deb:
	dpkg-buildpackage -us -uc -b

format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz
