# Cross build for aarch64 Linux with Debian's g++-aarch64-linux-gnu (make arm-deps), run under
# qemu-user: ctest starts every native suite through CMAKE_CROSSCOMPILING_EMULATOR, so `ctest`
# in build/aarch64 runs the ARM64 binaries on this x86 machine (make arm-test; docs/arm64.md).
# `-cpu max` gives the emulated CPU every feature qemu knows (ASIMD, FP16, dotprod, SVE ...);
# the sysroot (-L) is the cross toolchain's, where the dynamic loader and libstdc++ live.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(JEPA_AARCH64_SYSROOT /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH ${JEPA_AARCH64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-cpu;max;-L;${JEPA_AARCH64_SYSROOT})
