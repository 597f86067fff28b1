# Warnings as errors, hardening, and the sanitizer switch shared by every target.
add_library(kiln_flags INTERFACE)
target_compile_options(kiln_flags INTERFACE
  -Wall -Wextra -Wpedantic -Werror
  -Wshadow -Wnon-virtual-dtor -Wcast-align -Wunused -Woverloaded-virtual
  -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough
  -Wswitch-enum -Wno-error=switch-enum
  # GCC 12 reports false -Wrestrict positives inside std::string operator+ (GCC PR 105329).
  # (clang has no -Wrestrict and refuses the option: the fuzz build.)
  $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>
  -fstack-protector-strong -fPIE -D_FORTIFY_SOURCE=2 -D_GNU_SOURCE)
# Not -static-libstdc++: prometheus-cpp (shared only on Debian) brings the
# shared libstdc++, and two copies of it in one process must not meet.
target_link_options(kiln_flags INTERFACE -pie -Wl,-z,relro,-z,now,-z,noexecstack)

option(KILN_SANITIZE "Build with AddressSanitizer and UBSan" OFF)
if(KILN_SANITIZE)
  target_compile_options(kiln_flags INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(kiln_flags INTERFACE -fsanitize=address,undefined)
endif()

# libFuzzer targets (fuzz/README.md, `make fuzz`): clang only. Every kiln
# library gets the fuzzer's coverage instrumentation and ASan + UBSan; the
# fuzz/ executables then link libFuzzer itself (-fsanitize=fuzzer).
option(KILN_FUZZ "Build the libFuzzer targets of fuzz/ (clang), with ASan and UBSan" OFF)
if(KILN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "KILN_FUZZ needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++-16, or `make fuzz`")
  endif()
  target_compile_options(kiln_flags INTERFACE -fsanitize=fuzzer-no-link,address,undefined
    -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(kiln_flags INTERFACE -fsanitize=address,undefined)
endif()

# kiln_library(NAME SOURCES... DEPS ...): one library target per src/ folder,
# aliased as kiln::NAME.
function(kiln_library name)
  cmake_parse_arguments(K "" "" "SOURCES;DEPS" ${ARGN})
  add_library(kiln_${name} STATIC ${K_SOURCES})
  add_library(kiln::${name} ALIAS kiln_${name})
  target_include_directories(kiln_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(kiln_${name} PUBLIC kiln_flags ${K_DEPS})
endfunction()

# kiln_test(NAME LABEL SOURCES... DEPS ...): a GoogleTest binary registered
# with ctest under a tier label (unit, integration, escape).
function(kiln_test name label)
  cmake_parse_arguments(K "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${K_SOURCES})
  target_link_libraries(${name} PRIVATE kiln_flags GTest::gtest GTest::gtest_main ${K_DEPS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  # DISCOVERY_TIMEOUT is an argument of gtest_discover_tests, not a test
  # property: inside PROPERTIES it would end the list and drop ENVIRONMENT.
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 30
    PROPERTIES LABELS ${label}
    ENVIRONMENT "KILN_BIN=$<TARGET_FILE:kiln>;KILN_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
