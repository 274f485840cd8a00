# cmake/embed_kernels_script.cmake's part splicing, run on programs made here:
# parts (and a part's parts) spliced in at their `#include` lines, the rest of
# the text kept byte for byte, and a build that fails, naming the program and
# the part, for a missing part or an include line with more on it.
# Usage: cmake -DSCRIPT=cmake/embed_kernels_script.cmake -DWORK=DIR -P this file
set(k ${WORK}/kernels)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${k}/p)

function(embed program out_var result_var)
  execute_process(COMMAND ${CMAKE_COMMAND} -DOUT=${WORK}/out.cpp -DFILES=${k}/${program}
                          -P ${SCRIPT}
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  set(${result_var} ${rc} PARENT_SCOPE)
  if(rc EQUAL 0)
    file(READ ${WORK}/out.cpp text)
    set(${out_var} "${text}" PARENT_SCOPE)
  else()
    # CMake wraps a message's lines: compare with the whitespace collapsed.
    string(REGEX REPLACE "[ \n]+" " " err "${err}")
    set(${out_var} "${err}" PARENT_SCOPE)
  endif()
endfunction()

function(expect what haystack needle)
  string(FIND "${haystack}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what}: expected\n${needle}\nin\n${haystack}")
  endif()
endfunction()

# Two consecutive includes, a part that includes another, semicolons, brackets
# and a line continuation, and an include in a comment that stays as it is.
file(WRITE ${k}/ok.cl "// ok.cl\n// see #include \"p/none.cl\" in a comment\n#include \"p/a.cl\"\n#include \"p/b.cl\"\nint tail;\n")
file(WRITE ${k}/p/a.cl "int a[2] = {1, 2};\n#include \"p/c.cl\"\n")
file(WRITE ${k}/p/b.cl "#define B(x) \\\n  (x)\n")
file(WRITE ${k}/p/c.cl "int c;\n")
embed(ok.cl out rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ok.cl did not embed: ${out}")
endif()
set(want "// ok.cl\n// see #include \"p/none.cl\" in a comment\nint a[2] = {1, 2};\nint c;\n#define B(x) \\\n  (x)\nint tail;\n")
expect("ok.cl spliced" "${out}" "R\"NSK(${want})NSK\"")
expect("ok.cl named" "${out}" "{\"ok\", std::string(")

# A program the script must refuse, with an error that says `want`.
function(expect_refused program what want)
  embed(${program} out rc)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${program} embedded: ${what}")
  endif()
  expect("${what}" "${out}" "${want}")
endfunction()

file(WRITE ${k}/missing.cl "int x;\n#include \"p/gone.cl\"\n")
expect_refused(missing.cl "missing part" "missing.cl: #include \"p/gone.cl\": no such file in ${k}")
file(WRITE ${k}/trailing.cl "int x;\n#include \"p/c.cl\" // why\n")
expect_refused(trailing.cl "include with more on its line" "trailing.cl: #include \"p/c.cl\" must be alone on its line")
file(WRITE ${k}/loop.cl "int x;\n#include \"p/self.cl\"\n")
file(WRITE ${k}/p/self.cl "int y;\n#include \"p/self.cl\"\n")
expect_refused(loop.cl "include loop" "loop.cl: parts included more than 4 levels deep")
message(STATUS "embed_kernels: parts spliced; missing parts, trailing text and include loops refused")
