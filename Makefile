# Thin wrapper over Meson/Ninja: `make` builds into build/, `make check` runs every test,
# `make asan-check` runs the unit and integration tests under ASan+UBSan (build-asan/),
# `make fuzz` builds the libFuzzer harnesses with clang and runs each briefly (build-fuzz/),
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

.PHONY: all check unit-check asan-check interop fuzz clean format-check install deb

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

# Also part of `make check` (meson suite integration); this runs it alone, its steps shown.
interop: all
	$(MESON) test -C $(BUILD) --print-errorlogs --verbose --suite interop

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
	rm -rf $(BUILD) build-asan build-fuzz
