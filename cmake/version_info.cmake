# Writes the source of git_commit() (engine/core/version.hpp) with the git
# commit of the source tree. Run at every build by the nanscope_git_commit
# target (cmake -P): configure_file rewrites the file only when the commit
# changes, so an unchanged commit rebuilds nothing.
#   -DSOURCE_DIR=<repository> -DOUTPUT=<file.cpp> -DTEMPLATE=<file.cpp.in>
#   [-DGIT_COMMIT=<override>]
# A source tree that is not a git checkout (a release tarball) gets no commit;
# GIT_COMMIT set by the packager wins over git.
if(NOT DEFINED GIT_COMMIT OR GIT_COMMIT STREQUAL "")
  set(GIT_COMMIT "")
  find_program(GIT_EXECUTABLE git)
  if(GIT_EXECUTABLE)
    # Only the source tree's own repository counts, not one it happens to sit in.
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse --show-toplevel
                    OUTPUT_VARIABLE top OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
    if(rc EQUAL 0)
      file(REAL_PATH "${top}" top)
      file(REAL_PATH "${SOURCE_DIR}" src)
      if(top STREQUAL src)
        execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse --short=10 HEAD
                        OUTPUT_VARIABLE GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
        if(NOT rc EQUAL 0)
          set(GIT_COMMIT "")
        endif()
      endif()
    endif()
  endif()
endif()
configure_file(${TEMPLATE} ${OUTPUT} @ONLY)
