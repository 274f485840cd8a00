# Embeds kernels/*.cl into a generated C++ source so the binary carries its
# kernel sources (no files to find at run time). The generated table maps a
# program name (file name without .cl) to its source text, with the parts it
# includes (kernels/PROGRAM/*.cl) spliced in.
function(nanscope_embed_kernels out_var)
  file(GLOB cl_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/*.cl)
  file(GLOB cl_parts CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/*/*.cl)
  list(SORT cl_files)
  # A ';'-list would be split into separate command arguments: pass it '|'-joined.
  string(REPLACE ";" "|" files_arg "${cl_files}")
  set(out_cpp ${CMAKE_CURRENT_BINARY_DIR}/embedded_kernels.cpp)
  add_custom_command(
    OUTPUT ${out_cpp}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out_cpp} -DFILES=${files_arg}
            -P ${PROJECT_SOURCE_DIR}/cmake/embed_kernels_script.cmake
    DEPENDS ${cl_files} ${cl_parts} ${PROJECT_SOURCE_DIR}/cmake/embed_kernels_script.cmake
    COMMENT "Embedding OpenCL kernels"
    VERBATIM)
  set(${out_var} ${out_cpp} PARENT_SCOPE)
endfunction()
