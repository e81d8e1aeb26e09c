# The `infiniops_docs` target (`INFINI_OPS_BUILD_DOCS`): one reST page per
# operator of the manifest, written by `scripts/generate_api_docs.py`, turned
# into HTML by Sphinx under `${CMAKE_BINARY_DIR}/docs/reference/html`.

include(PythonProbe)

function(infini_ops_add_docs_target manifest)
  # Prefer the build's own interpreter, so the docs use the Sphinx of the
  # environment the package is built for; a `sphinx-build` on `PATH` (or the
  # `SPHINX_BUILD` cache entry) is the fallback.
  infini_ops_find_python_module(sphinx SPHINX CANDIDATES "${Python_EXECUTABLE}")
  if(SPHINX_FOUND)
    set(sphinx_command ${SPHINX_COMMAND} -m sphinx)
  else()
    find_program(SPHINX_BUILD NAMES sphinx-build
                 DOC "The sphinx-build program for the infiniops_docs target")
    if(NOT SPHINX_BUILD)
      message(FATAL_ERROR
        "`INFINI_OPS_BUILD_DOCS` requires Sphinx, but `${Python_EXECUTABLE}` "
        "cannot import `sphinx` (${SPHINX_ERROR}) and no `sphinx-build` is on "
        "`PATH`. Install it (`python -m pip install sphinx`, or the `dev` "
        "extra), set `SPHINX_BUILD`, or turn `INFINI_OPS_BUILD_DOCS` off.")
    endif()
    set(sphinx_command "${SPHINX_BUILD}")
  endif()

  set(source_dir "${CMAKE_BINARY_DIR}/docs/reference/source")
  set(html_dir "${CMAKE_BINARY_DIR}/docs/reference/html")
  add_custom_target(infiniops_docs
    COMMAND "${Python_EXECUTABLE}" "${PROJECT_SOURCE_DIR}/scripts/generate_api_docs.py"
            --manifest "${manifest}" --source-dir "${PROJECT_SOURCE_DIR}"
            --output-dir "${source_dir}"
    COMMAND ${sphinx_command} -b html -q -c "${PROJECT_SOURCE_DIR}/docs/reference"
            "${source_dir}" "${html_dir}"
    COMMENT "Writing the operator reference to ${html_dir}"
    VERBATIM)
  message(STATUS "Docs: `cmake --build . --target infiniops_docs` writes ${html_dir}")
endfunction()
