# Writes one gzip'd manual page from a program's --help and --version
# (help2man), at build time. For nanscope-cli each subcommand's --help is added
# as a section of its own, so the page covers every subcommand and option.
#   -DPROGRAM=<exe> -DNAME=<name> -DINCLUDE=<file.h2m> -DOUTPUT=<page.1.gz>
#   -DHELP2MAN=<help2man> -DGZIP=<gzip>
get_filename_component(out_dir ${OUTPUT} DIRECTORY)
file(MAKE_DIRECTORY ${out_dir})
set(include_file ${out_dir}/${NAME}.h2m)
file(READ ${INCLUDE} text)

# CLI11 lists the subcommands under "Subcommands:" as "  name   description";
# each one's --help becomes a subsection, and so do theirs (scenario run, ...).
function(subcommand_sections words out_var)
  execute_process(COMMAND ${PROGRAM} ${words} --help OUTPUT_VARIABLE help RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${PROGRAM} ${words} --help failed (${rc})")
  endif()
  set(result "")
  if(words)
    # roff: a backslash is \e; lines starting with . or ' would be requests.
    string(REPLACE "\\" "\\e" text "${help}")
    string(REGEX REPLACE "\n([.'])" "\n\\\\&\\1" text "${text}")
    string(REPLACE ";" " " title "${words}")
    set(result ".SS \"${NAME} ${title}\"\n.nf\n${text}.fi\n")
  endif()
  string(FIND "${help}" "Subcommands:" at)
  if(at GREATER -1)
    string(SUBSTRING "${help}" ${at} -1 subs)
    string(REPLACE "\n" ";" lines "${subs}")
    foreach(line ${lines})
      if(line MATCHES "^  ([a-z][a-z0-9-]*) ")
        set(next ${words} ${CMAKE_MATCH_1})
        subcommand_sections("${next}" section)
        string(APPEND result "${section}")
      endif()
    endforeach()
  endif()
  set(${out_var} "${result}" PARENT_SCOPE)
endfunction()

subcommand_sections("" sections)
if(NOT sections STREQUAL "")
  set(text "[SUBCOMMANDS]\n${sections}\n${text}")
endif()
file(WRITE ${include_file} "${text}")

# Run by its bare name from PATH: a usage line that echoes argv[0] (Qt's) then
# says "nanscope", not the build tree's path.
get_filename_component(program_dir ${PROGRAM} DIRECTORY)
get_filename_component(program_name ${PROGRAM} NAME)
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PATH=${program_dir}:$ENV{PATH}"
                        ${HELP2MAN} --no-info --no-discard-stderr --section=1 --include=${include_file}
                        --output=${out_dir}/${NAME}.1 ${program_name}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "help2man ${PROGRAM} failed (${rc})")
endif()
execute_process(COMMAND ${GZIP} -9nf ${out_dir}/${NAME}.1 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip ${out_dir}/${NAME}.1 failed (${rc})")
endif()
