# Apache Arrow and Parquet C++ from a pyarrow wheel (Debian packages neither): the imported targets
# Arrow::arrow and Arrow::parquet, and ARROW_LIBRARIES (their full paths).
#
# Where they come from (cache variables):
#   ARROW_INCLUDE_DIR  pyarrow.get_include(): the arrow/ and parquet/ headers
#   ARROW_LIBRARY_DIR  pyarrow.get_library_dirs()[0]: libarrow.so.<SO> and libparquet.so.<SO>
# scripts/setup.sh sets both from the pyarrow of the Python it chose, and configures again when they
# change. When both are unset (cmake run by hand), ARROW_PYTHON (default: python3 on PATH) is asked.
#
# The wheel ships only versioned names (libarrow.so.2600, no libarrow.so to -l against), so the
# libraries are linked by full path; the SO version is read from the headers' arrow/util/config.h,
# so the headers and libraries of two different wheels are refused rather than mixed. CMake puts
# ARROW_LIBRARY_DIR in the RUNPATH of every executable that links them, so build/finetune runs
# without LD_LIBRARY_PATH. A test link at configure time catches a C++ ABI mismatch (old-ABI
# wheels: std::string symbols without [abi:cxx11]) with a clear message instead of a link error
# later.
set(ARROW_INCLUDE_DIR "" CACHE PATH "pyarrow.get_include() of the wheel providing Arrow/Parquet C++")
set(ARROW_LIBRARY_DIR "" CACHE PATH "pyarrow.get_library_dirs()[0] of the same wheel")
set(ARROW_PYTHON "python3" CACHE STRING "Python asked for pyarrow's paths when ARROW_INCLUDE_DIR is unset")

if(NOT ARROW_INCLUDE_DIR OR NOT ARROW_LIBRARY_DIR)
  execute_process(
    COMMAND ${ARROW_PYTHON} -c "import pyarrow; print(pyarrow.get_include()); print(pyarrow.get_library_dirs()[0])"
    OUTPUT_VARIABLE arrow_paths ERROR_VARIABLE arrow_error RESULT_VARIABLE arrow_status
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_STRIP_TRAILING_WHITESPACE)
  if(NOT arrow_status EQUAL 0)
    string(REGEX REPLACE ".*\n" "" arrow_error "${arrow_error}")  # the exception's line
    message(FATAL_ERROR "finetune: Arrow/Parquet C++ come from the pyarrow wheel, but `${ARROW_PYTHON} -c "
      "'import pyarrow'` failed (${arrow_error}). Install pyarrow (pip install pyarrow) for that Python, "
      "or pass -DARROW_PYTHON=/path/to/python, or -DARROW_INCLUDE_DIR=... -DARROW_LIBRARY_DIR=...")
  endif()
  string(REPLACE "\n" ";" arrow_paths "${arrow_paths}")
  list(GET arrow_paths 0 arrow_include)
  list(GET arrow_paths 1 arrow_libdir)
  set(ARROW_INCLUDE_DIR "${arrow_include}" CACHE PATH "" FORCE)
  set(ARROW_LIBRARY_DIR "${arrow_libdir}" CACHE PATH "" FORCE)
endif()

set(arrow_config_header "${ARROW_INCLUDE_DIR}/arrow/util/config.h")
if(NOT EXISTS "${arrow_config_header}" OR NOT EXISTS "${ARROW_INCLUDE_DIR}/parquet/arrow/reader.h")
  message(FATAL_ERROR "finetune: ARROW_INCLUDE_DIR=${ARROW_INCLUDE_DIR} has no arrow/util/config.h or "
    "parquet/arrow/reader.h (expected pyarrow.get_include() of a pyarrow wheel)")
endif()
file(STRINGS "${arrow_config_header}" arrow_so_line REGEX "^#define ARROW_SO_VERSION \"[0-9]+\"")
file(STRINGS "${arrow_config_header}" arrow_version_line REGEX "^#define ARROW_VERSION_STRING \"[^\"]+\"")
string(REGEX REPLACE ".*\"([0-9]+)\".*" "\\1" ARROW_SO_VERSION "${arrow_so_line}")
string(REGEX REPLACE ".*\"([^\"]+)\".*" "\\1" ARROW_VERSION "${arrow_version_line}")
if(NOT ARROW_SO_VERSION)
  message(FATAL_ERROR "finetune: no ARROW_SO_VERSION in ${arrow_config_header}")
endif()
# scripts/setup.sh configures again when the Python's pyarrow version differs from this.
set(ARROW_WHEEL_VERSION "${ARROW_VERSION}" CACHE INTERNAL "Arrow version of ARROW_INCLUDE_DIR")

set(ARROW_LIBRARIES)
foreach(name parquet arrow)  # the order they link in: libparquet needs libarrow
  set(library "${ARROW_LIBRARY_DIR}/lib${name}.so.${ARROW_SO_VERSION}")
  if(NOT EXISTS "${library}")
    message(FATAL_ERROR "finetune: ${library} not found: ARROW_LIBRARY_DIR=${ARROW_LIBRARY_DIR} must hold the "
      "libraries of the wheel whose headers are in ARROW_INCLUDE_DIR=${ARROW_INCLUDE_DIR} (Arrow ${ARROW_VERSION})")
  endif()
  list(APPEND ARROW_LIBRARIES "${library}")
  if(NOT TARGET Arrow::${name})
    add_library(Arrow::${name} SHARED IMPORTED)
  endif()
  set_target_properties(Arrow::${name} PROPERTIES IMPORTED_LOCATION "${library}"
    IMPORTED_SONAME "lib${name}.so.${ARROW_SO_VERSION}" INTERFACE_INCLUDE_DIRECTORIES "${ARROW_INCLUDE_DIR}")
endforeach()
set_target_properties(Arrow::parquet PROPERTIES INTERFACE_LINK_LIBRARIES Arrow::arrow)

# Note [Arrow needs C++20]: the headers of Arrow 2x use std::span and concepts, so the test link
# (and every translation unit that includes them) is compiled as C++20.
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_INCLUDES "${ARROW_INCLUDE_DIR}")
set(CMAKE_REQUIRED_LIBRARIES "${ARROW_LIBRARIES}")
set(CMAKE_REQUIRED_FLAGS "-std=c++20")
set(CMAKE_REQUIRED_QUIET ON)
unset(FINETUNE_ARROW_LINKS CACHE)  # checked at every configure: the wheel may have changed
check_cxx_source_compiles([[
#include <arrow/status.h>
#include <parquet/exception.h>
int main() { return static_cast<int>(arrow::Status::OK().ToString().size() + parquet::ParquetException("x").what()[0]); }
]] FINETUNE_ARROW_LINKS)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_LIBRARIES)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_QUIET)
if(NOT FINETUNE_ARROW_LINKS)
  message(FATAL_ERROR "finetune: cannot compile and link a C++20 program against Arrow ${ARROW_VERSION} "
    "(${ARROW_LIBRARIES}). The likely cause is a pyarrow wheel built with the old C++ ABI "
    "(_GLIBCXX_USE_CXX11_ABI=0; LibTorch and finetune use the new one): install a newer pyarrow. "
    "See CMakeFiles/CMakeError.log / CMakeConfigureLog.yaml for the compiler's message.")
endif()
message(STATUS "finetune: Arrow/Parquet ${ARROW_VERSION} from ${ARROW_LIBRARY_DIR}")
