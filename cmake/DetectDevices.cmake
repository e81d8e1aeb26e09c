# Device auto-detection (`AUTO_DETECT_DEVICES`; docs/behaviour.md, "Device and
# backend detection").
#
# What turns a device on:
#   CPU        always.
#   NVIDIA     `/dev/nvidia*` exists; skipped when another GPU backend is on.
#   Iluvatar   `/dev/iluvatar*` exists.
#   Hygon      `$DTK_ROOT` (default `/opt/dtk`) has `cuda/bin/nvcc`,
#              `cuda/cuda/bin/nvcc` or `cuda/cuda-*/bin/nvcc`.
#   MetaX      env `MACA_PATH` is defined, else a PCI device of vendor 0x9999
#              (`/sys/bus/pci/devices/*/vendor`).
#   Cambricon  env `NEUWARE_HOME` is defined.
#   Moore      env `MUSA_ROOT`, `MUSA_HOME` or `MUSA_PATH` is defined.
#   Ascend     env `ASCEND_HOME_PATH` is defined, or `/dev/davinci0` exists.
#   T-Head     env `PPU_SDK_HOME` (the T-Head PPU SDK) or `THEAD_HOME` is
#              defined. The original has no T-Head detection; these are this
#              project's choice.
#
# Detection sets the resolved (normal) variables, never the cache, so turning
# `AUTO_DETECT_DEVICES` off again on a later configure forgets what it found.

set(INFINI_OPS_DETECT_ROOT "" CACHE PATH
    "Prefix of the device files auto-detection reads (/dev, /sys, /opt/dtk); only tests set it")
mark_as_advanced(INFINI_OPS_DETECT_ROOT)

# The GPU options of which at most one may be on; Cambricon is not among them
# (docs/behaviour.md, "Build options"), but it still makes auto-detection skip NVIDIA.
set(INFINI_OPS_EXCLUSIVE_GPU_OPTIONS
    WITH_NVIDIA WITH_ILUVATAR WITH_HYGON WITH_THEAD WITH_METAX WITH_MOORE WITH_ASCEND)
set(INFINI_OPS_ACCELERATOR_OPTIONS ${INFINI_OPS_EXCLUSIVE_GPU_OPTIONS} WITH_CAMBRICON)

function(_infini_ops_first_defined_env out_var)
  foreach(name IN LISTS ARGN)
    if(DEFINED ENV{${name}})
      set(${out_var} "${name}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out_var} "" PARENT_SCOPE)
endfunction()

# Sets `WITH_CPU` and each detected `WITH_<DEVICE>` in the caller's scope.
function(infini_ops_detect_devices)
  set(root "${INFINI_OPS_DETECT_ROOT}")
  # Pairs of option and the reason it was detected, for the status lines.
  set(found_options "")

  file(GLOB nodes "${root}/dev/iluvatar*")
  if(nodes)
    list(GET nodes 0 node)
    list(APPEND found_options WITH_ILUVATAR)
    set(reason_WITH_ILUVATAR "${node} exists")
  endif()

  if(DEFINED ENV{DTK_ROOT})
    set(dtk "$ENV{DTK_ROOT}")
  else()
    set(dtk "${root}/opt/dtk")
  endif()
  file(GLOB nvccs "${dtk}/cuda/bin/nvcc" "${dtk}/cuda/cuda/bin/nvcc"
       "${dtk}/cuda/cuda-*/bin/nvcc")
  if(nvccs)
    list(GET nvccs 0 nvcc)
    list(APPEND found_options WITH_HYGON)
    set(reason_WITH_HYGON "the DTK compiler ${nvcc} exists")
  endif()

  if(DEFINED ENV{MACA_PATH})
    list(APPEND found_options WITH_METAX)
    set(reason_WITH_METAX "MACA_PATH is set")
  else()
    file(GLOB vendor_files "${root}/sys/bus/pci/devices/*/vendor")
    foreach(vendor_file IN LISTS vendor_files)
      file(READ "${vendor_file}" vendor)
      if(vendor MATCHES "9999")
        list(APPEND found_options WITH_METAX)
        set(reason_WITH_METAX "${vendor_file} names vendor 0x9999")
        break()
      endif()
    endforeach()
  endif()

  if(DEFINED ENV{NEUWARE_HOME})
    list(APPEND found_options WITH_CAMBRICON)
    set(reason_WITH_CAMBRICON "NEUWARE_HOME is set")
  endif()

  _infini_ops_first_defined_env(variable MUSA_ROOT MUSA_HOME MUSA_PATH)
  if(variable)
    list(APPEND found_options WITH_MOORE)
    set(reason_WITH_MOORE "${variable} is set")
  endif()

  if(DEFINED ENV{ASCEND_HOME_PATH})
    list(APPEND found_options WITH_ASCEND)
    set(reason_WITH_ASCEND "ASCEND_HOME_PATH is set")
  elseif(EXISTS "${root}/dev/davinci0")
    list(APPEND found_options WITH_ASCEND)
    set(reason_WITH_ASCEND "${root}/dev/davinci0 exists")
  endif()

  _infini_ops_first_defined_env(variable PPU_SDK_HOME THEAD_HOME)
  if(variable)
    list(APPEND found_options WITH_THEAD)
    set(reason_WITH_THEAD "${variable} is set")
  endif()

  set(WITH_CPU ON PARENT_SCOPE)
  message(STATUS "Auto-detected CPU: enabling WITH_CPU (always)")
  foreach(option IN LISTS found_options)
    set(${option} ON)
    set(${option} ON PARENT_SCOPE)
    message(STATUS "Auto-detected device: enabling ${option} (${reason_${option}})")
  endforeach()

  file(GLOB nodes "${root}/dev/nvidia*")
  if(nodes)
    list(GET nodes 0 node)
    # Machines of CUDA-compatible vendors often expose NVIDIA-like device
    # files too; their own backend is the right one.
    set(others "")
    foreach(option IN LISTS INFINI_OPS_ACCELERATOR_OPTIONS)
      if(NOT option STREQUAL "WITH_NVIDIA" AND ${option})
        list(APPEND others "${option}")
      endif()
    endforeach()
    if(others)
      list(JOIN others ", " others)
      message(STATUS
        "Skipping auto-detected NVIDIA environment (${node} exists) because "
        "${others} is enabled; build one GPU backend at a time.")
    else()
      set(WITH_NVIDIA ON PARENT_SCOPE)
      message(STATUS "Auto-detected device: enabling WITH_NVIDIA (${node} exists)")
    endif()
  endif()
endfunction()
