# Backend detection and checks: PyTorch (`WITH_TORCH`, `WITH_LINKED`,
# `AUTO_DETECT_BACKENDS`) and the CUDA toolkit that `WITH_TRITON` needs.

include(PythonProbe)

# Sets `WITH_TORCH` (when auto-detected), `_TORCH_PYTHON` and
# `_TORCH_PYTHON_COMMAND` in the caller's scope, or fails the configure when an
# option that needs torch is on and no interpreter can import it.
#
# `AUTO_DETECT_BACKENDS` tries the interpreters of docs/behaviour.md, "Device and
# backend detection" in order; the first that imports `torch` turns `WITH_TORCH`
# on and serves every later step that needs torch. Without auto-detection only
# `Python_EXECUTABLE` is checked: it is the interpreter the package is installed
# for, so it is the one that must import torch at run time.
function(infini_ops_detect_torch)
  set(needed_by "")
  foreach(option IN ITEMS WITH_TORCH WITH_LINKED)
    if(${option})
      list(APPEND needed_by "`${option}`")
    endif()
  endforeach()
  if(NOT AUTO_DETECT_BACKENDS AND NOT needed_by)
    return()
  endif()

  set(candidates "${Python_EXECUTABLE}")
  if(AUTO_DETECT_BACKENDS)
    list(APPEND candidates python3 python /usr/bin/python3 /usr/local/bin/python3
         /opt/conda/bin/python /opt/conda/bin/python3)
  endif()
  infini_ops_find_python_module(torch TORCH CANDIDATES ${candidates})

  if(TORCH_FOUND)
    # The ATen generator reads torch's schema through `torchgen`, which
    # needs PyYAML (torch itself does not depend on it).
    execute_process(
      COMMAND ${TORCH_COMMAND} -c "import yaml, torchgen"
      RESULT_VARIABLE torchgen_result OUTPUT_QUIET ERROR_QUIET)
    if(NOT torchgen_result EQUAL 0)
      if(WITH_TORCH)
        message(FATAL_ERROR
          "`WITH_TORCH` requires `torchgen` and PyYAML importable by "
          "${TORCH_PYTHON} to generate the ATen backend: "
          "`python -m pip install pyyaml`, or turn `WITH_TORCH` off.")
      endif()
      message(STATUS
        "PyTorch ${TORCH_VERSION} found (${TORCH_PYTHON}) but `import yaml, "
        "torchgen` fails (install PyYAML for the ATen backend): WITH_TORCH "
        "stays OFF")
      return()
    endif()
    set(_TORCH_PYTHON "${TORCH_PYTHON}" PARENT_SCOPE)
    set(_TORCH_PYTHON_COMMAND "${TORCH_COMMAND}" PARENT_SCOPE)
    set(where "${TORCH_PYTHON}")
    if(TORCH_CLEAN)
      string(APPEND where ", with PYTHONPATH and PYTHONNOUSERSITE unset")
    endif()
    if(AUTO_DETECT_BACKENDS AND NOT WITH_TORCH)
      set(WITH_TORCH ON PARENT_SCOPE)
      message(STATUS
        "Auto-detected PyTorch ${TORCH_VERSION} (${where}): enabling WITH_TORCH")
    else()
      message(STATUS "Found PyTorch ${TORCH_VERSION} (${where})")
    endif()
    return()
  endif()

  list(JOIN TORCH_TRIED ", " tried)
  if(needed_by)
    list(LENGTH needed_by count)
    list(JOIN needed_by " and " needed_by)
    if(count EQUAL 1)
      set(verb "requires")
    else()
      set(verb "require")
    endif()
    message(FATAL_ERROR
      "${needed_by} ${verb} an importable `torch`, but no interpreter could "
      "import it (tried: ${tried}; ${TORCH_ERROR}). Install PyTorch for that "
      "interpreter, or turn the option off.")
  endif()
  message(STATUS "PyTorch not found (tried: ${tried}): WITH_TORCH stays OFF")
endfunction()

# Sets `<prefix>_NVCC` and `<prefix>_VERSION` (e.g. "13.0") to the CUDA
# compiler found first in `CUDA_HOME`, `CUDA_PATH`, then on `PATH`; both are
# empty when there is none.
function(infini_ops_find_cuda_toolkit prefix)
  set(nvcc "")
  foreach(variable IN ITEMS CUDA_HOME CUDA_PATH)
    if(DEFINED ENV{${variable}} AND EXISTS "$ENV{${variable}}/bin/nvcc")
      set(nvcc "$ENV{${variable}}/bin/nvcc")
      break()
    endif()
  endforeach()
  if(NOT nvcc)
    # Only `PATH`: CMake's default system prefixes would find an nvcc the
    # user did not choose.
    find_program(nvcc_on_path NAMES nvcc PATHS ENV PATH NO_DEFAULT_PATH NO_CACHE)
    if(nvcc_on_path)
      set(nvcc "${nvcc_on_path}")
    endif()
  endif()
  set(version "")
  if(nvcc)
    execute_process(
      COMMAND "${nvcc}" --version
      RESULT_VARIABLE result
      OUTPUT_VARIABLE output
      ERROR_QUIET
      TIMEOUT 60)
    if(result EQUAL 0 AND output MATCHES "release ([0-9]+\\.[0-9]+)")
      set(version "${CMAKE_MATCH_1}")
    endif()
  endif()
  set(${prefix}_NVCC "${nvcc}" PARENT_SCOPE)
  set(${prefix}_VERSION "${version}" PARENT_SCOPE)
endfunction()

# Sets `<prefix>_NVCC` to the `ptxas` Triton compiles with (`TRITON_PTXAS_PATH`,
# else the one in Triton's NVIDIA backend) and `<prefix>_VERSION` to its CUDA
# release; both are empty when there is none. `python_command` runs the
# interpreter that imports `triton`.
function(infini_ops_find_triton_ptxas prefix python_command)
  set(code "import os, triton; print(os.environ.get('TRITON_PTXAS_PATH') or os.path.join(os.path.dirname(triton.__file__), 'backends', 'nvidia', 'bin', 'ptxas'))")
  execute_process(
    COMMAND ${python_command} -c "${code}"
    RESULT_VARIABLE result
    OUTPUT_VARIABLE ptxas
    ERROR_QUIET
    OUTPUT_STRIP_TRAILING_WHITESPACE
    TIMEOUT 300)
  set(version "")
  if(NOT result EQUAL 0 OR NOT EXISTS "${ptxas}")
    set(ptxas "")
  else()
    execute_process(
      COMMAND "${ptxas}" --version
      RESULT_VARIABLE result
      OUTPUT_VARIABLE output
      ERROR_QUIET
      TIMEOUT 60)
    if(result EQUAL 0 AND output MATCHES "release ([0-9]+\\.[0-9]+)")
      set(version "${CMAKE_MATCH_1}")
    endif()
  endif()
  set(${prefix}_NVCC "${ptxas}" PARENT_SCOPE)
  set(${prefix}_VERSION "${version}" PARENT_SCOPE)
endfunction()

# Fails the configure unless `WITH_TRITON` has what it needs (docs/behaviour.md,
# "Build options"): NVIDIA, Python bindings, the `triton` package and CUDA Toolkit
# 12.0+.
function(infini_ops_check_triton)
  if(NOT WITH_NVIDIA)
    message(FATAL_ERROR
      "`WITH_TRITON` requires `WITH_NVIDIA`: the Triton JIT backend runs on "
      "NVIDIA GPUs only.")
  endif()
  if(NOT GENERATE_PYTHON_BINDINGS)
    message(FATAL_ERROR
      "`WITH_TRITON` requires `GENERATE_PYTHON_BINDINGS`: Triton kernels are "
      "reached only through the Python surface.")
  endif()
  infini_ops_find_python_module(triton TRITON CANDIDATES "${Python_EXECUTABLE}")
  if(NOT TRITON_FOUND)
    message(FATAL_ERROR
      "`WITH_TRITON` requires the `triton` package, but `${Python_EXECUTABLE}` "
      "cannot import it (${TRITON_ERROR}).")
  endif()
  infini_ops_find_cuda_toolkit(CUDA)
  if(NOT CUDA_NVCC)
    # Triton compiles with the CUDA tools it ships (`ptxas`, or the one
    # `TRITON_PTXAS_PATH` names), so a machine without a CUDA toolkit, such
    # as a cross-build host without a GPU, still qualifies when those are
    # 12.0 or later.
    infini_ops_find_triton_ptxas(CUDA "${TRITON_COMMAND}")
  endif()
  if(NOT CUDA_NVCC)
    message(FATAL_ERROR
      "`WITH_TRITON` requires CUDA Toolkit 12.0 or later, but no `nvcc` was "
      "found in `CUDA_HOME`, `CUDA_PATH` or on `PATH`. Triton's own `ptxas` "
      "(`TRITON_PTXAS_PATH`, or `triton/backends/nvidia/bin/ptxas`) is "
      "missing too.")
  endif()
  if(NOT CUDA_VERSION OR CUDA_VERSION VERSION_LESS 12.0)
    if(NOT CUDA_VERSION)
      set(CUDA_VERSION "of unknown release")
    else()
      set(CUDA_VERSION "release ${CUDA_VERSION}")
    endif()
    message(FATAL_ERROR
      "`WITH_TRITON` requires CUDA Toolkit 12.0 or later, but `${CUDA_NVCC}` "
      "is ${CUDA_VERSION}.")
  endif()
  message(STATUS
    "Triton ${TRITON_VERSION} (${Python_EXECUTABLE}) and CUDA ${CUDA_VERSION} "
    "(${CUDA_NVCC}) found for WITH_TRITON")
endfunction()
