# Finding a Python interpreter that can import a given module.
#
# pip builds in an isolated environment: it points `PYTHONPATH` at a
# `sitecustomize.py` that removes the user's site-packages from `sys.path` and
# sets `PYTHONNOUSERSITE`. The interpreter scikit-build-core hands to CMake
# (`Python_EXECUTABLE`) is the user's own, but under that environment it cannot
# see `torch` even when the user has it. So each candidate is tried twice:
# first with the environment as it is (which keeps a user's own `PYTHONPATH`
# working in non-isolated builds), then with pip's two variables unset, which
# restores the interpreter's normal `sys.path`.

set(INFINI_OPS_CLEAN_PYTHON_ENVIRONMENT
    "${CMAKE_COMMAND}" -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE)

# infini_ops_find_python_module(<module> <prefix> CANDIDATES <python>...)
#
# Tries `import <module>` with each candidate (an absolute path or a program
# name looked up on `PATH`) and sets, in the caller's scope:
#   <prefix>_FOUND    TRUE when one candidate imported the module
#   <prefix>_PYTHON   that interpreter
#   <prefix>_COMMAND  the command line to run it with the environment that
#                     worked (a list: the interpreter, maybe behind `cmake -E env`)
#   <prefix>_VERSION  the module's `__version__`, if any
#   <prefix>_CLEAN    TRUE when only the cleaned environment could import it
#                     (the sign of pip's build isolation)
#   <prefix>_TRIED    every interpreter tried, for error messages
#   <prefix>_ERROR    the last line of the last failure
function(infini_ops_find_python_module module prefix)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "" "CANDIDATES")
  set(code "import ${module}; print(getattr(${module}, '__version__', ''))")
  set(tried "")
  set(last_error "")
  foreach(candidate IN LISTS arg_CANDIDATES)
    # `find_program(... NO_CACHE)` skips the search when the variable is set.
    unset(python)
    if(candidate STREQUAL "")
      continue()
    elseif(IS_ABSOLUTE "${candidate}")
      if(NOT EXISTS "${candidate}")
        continue()
      endif()
      set(python "${candidate}")
    else()
      find_program(python NAMES "${candidate}" NO_CACHE)
      if(NOT python)
        continue()
      endif()
    endif()
    if(python IN_LIST tried)
      continue()
    endif()
    list(APPEND tried "${python}")
    foreach(environment IN ITEMS inherited clean)
      if(environment STREQUAL "clean")
        set(command ${INFINI_OPS_CLEAN_PYTHON_ENVIRONMENT} "${python}")
      else()
        set(command "${python}")
      endif()
      execute_process(
        COMMAND ${command} -c "${code}"
        RESULT_VARIABLE result
        OUTPUT_VARIABLE output
        ERROR_VARIABLE error
        OUTPUT_STRIP_TRAILING_WHITESPACE
        ERROR_STRIP_TRAILING_WHITESPACE
        TIMEOUT 300)
      if(result EQUAL 0)
        set(${prefix}_FOUND TRUE PARENT_SCOPE)
        set(${prefix}_PYTHON "${python}" PARENT_SCOPE)
        set(${prefix}_COMMAND "${command}" PARENT_SCOPE)
        set(${prefix}_VERSION "${output}" PARENT_SCOPE)
        if(environment STREQUAL "clean")
          set(${prefix}_CLEAN TRUE PARENT_SCOPE)
        else()
          set(${prefix}_CLEAN FALSE PARENT_SCOPE)
        endif()
        set(${prefix}_TRIED "${tried}" PARENT_SCOPE)
        set(${prefix}_ERROR "" PARENT_SCOPE)
        return()
      endif()
      # The last line of a traceback names the exception, which is what a
      # user needs to see ("ModuleNotFoundError: No module named 'torch'").
      string(REGEX REPLACE "^.*\n" "" last_error "${error}")
      if(last_error STREQUAL "")
        set(last_error "exit status ${result}")
      endif()
    endforeach()
  endforeach()
  set(${prefix}_FOUND FALSE PARENT_SCOPE)
  set(${prefix}_PYTHON "" PARENT_SCOPE)
  set(${prefix}_COMMAND "" PARENT_SCOPE)
  set(${prefix}_VERSION "" PARENT_SCOPE)
  set(${prefix}_CLEAN FALSE PARENT_SCOPE)
  set(${prefix}_TRIED "${tried}" PARENT_SCOPE)
  set(${prefix}_ERROR "${last_error}" PARENT_SCOPE)
endfunction()
