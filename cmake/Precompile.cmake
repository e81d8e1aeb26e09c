# Compiling the CPU kernels while the package is built, so that a fresh
# install runs its first calls without compiling (issue 13, "no compile
# wait").
#
# `INFINI_OPS_PRECOMPILE` chooses what: `models` (default: the operators of
# `infini.ops.models`, an LLM's inference set), `all` (every CPU operator the
# manifest lists; about ten minutes on two cores), `none`, or a comma/
# semicolon list of operators. The kernels are compiled by `python -m
# infini.ops precompile` (one process per operator on every core the build
# may use) into `<build>/kernel-cache` and installed as
# `infini/ops/_kernels`; at run time `infini.ops.native.cpu.jit` copies them
# into the user's kernel cache the first time that cache lacks them (the
# directory names carry the package version and a hash of the kernel
# sources, so only matching kernels are ever used).
#
# It needs an interpreter that imports numba and torch: the one that imports
# torch for the ATen backend, else `Python_EXECUTABLE`. pip's isolated build
# environment usually has neither before the package's own dependencies are
# installed; then the step is skipped with a message and kernels compile on
# first use (or run `python -m infini.ops precompile` after installing).

set(INFINI_OPS_PRECOMPILE "models" CACHE STRING
    "CPU kernels compiled at build time: models, all, none, or a comma/semicolon list of operators")

function(infini_ops_precompile_kernels manifest)
  string(TOLOWER "${INFINI_OPS_PRECOMPILE}" selection)
  if(selection STREQUAL "none" OR selection STREQUAL "off" OR selection STREQUAL "")
    return()
  endif()
  if(NOT WITH_CPU OR NOT GENERATE_PYTHON_BINDINGS
     OR NOT GENERATE_OPERATOR_CALL_INSTANTIATIONS)
    message(STATUS
      "InfiniOps precompile: skipped (needs WITH_CPU, GENERATE_PYTHON_BINDINGS "
      "and GENERATE_OPERATOR_CALL_INSTANTIATIONS)")
    return()
  endif()
  if(_TORCH_PYTHON)
    set(python "${_TORCH_PYTHON}")
  else()
    set(python "${Python_EXECUTABLE}")
  endif()
  execute_process(
    COMMAND ${INFINI_OPS_CLEAN_PYTHON_ENVIRONMENT} "${python}" -c "import numba, torch"
    RESULT_VARIABLE probe_result OUTPUT_QUIET ERROR_QUIET)
  if(NOT probe_result EQUAL 0)
    message(STATUS
      "InfiniOps precompile: skipped, ${python} cannot import numba and torch "
      "yet; kernels compile on first use (or run `python -m infini.ops "
      "precompile` after installing)")
    return()
  endif()

  if(selection STREQUAL "models")
    set(arguments --models)
  elseif(selection STREQUAL "all")
    set(arguments "")
  else()
    string(REPLACE "," ";" arguments "${INFINI_OPS_PRECOMPILE}")
  endif()
  set(cache "${CMAKE_BINARY_DIR}/kernel-cache")
  message(STATUS "InfiniOps precompile (${INFINI_OPS_PRECOMPILE}) with ${python}: "
                 "a few minutes the first time (`pip install -v` shows each operator)")
  execute_process(
    COMMAND ${INFINI_OPS_CLEAN_PYTHON_ENVIRONMENT}
            "PYTHONPATH=${PROJECT_SOURCE_DIR}/src"
            "INFINI_OPS_MANIFEST=${manifest}"
            "INFINI_OPS_CACHE_DIR=${cache}"
            PYTHONDONTWRITEBYTECODE=1
            "${python}" -m infini.ops precompile ${arguments}
    RESULT_VARIABLE precompile_result
    # Shown as each operator finishes (the progress display of `pip install -v`).
    OUTPUT_VARIABLE precompile_output
    ECHO_OUTPUT_VARIABLE
    ERROR_VARIABLE precompile_errors)
  if(NOT precompile_result EQUAL 0)
    # A kernel that fails to compile ahead still compiles on its first call
    # (and fails there with the operator named): the package stays usable.
    message(WARNING
      "InfiniOps precompile failed (${precompile_result}); the kernels not "
      "compiled compile on first use.\n${precompile_errors}")
  endif()
  if(EXISTS "${cache}/numba")
    # Temporary files of an interrupted write and the lock serialising
    # index updates are not kernels.
    install(DIRECTORY "${cache}/numba/" DESTINATION infini/ops/_kernels
            PATTERN "*.tmp" EXCLUDE PATTERN "*.tmp.*" EXCLUDE
            PATTERN ".lock" EXCLUDE)
  endif()
endfunction()
