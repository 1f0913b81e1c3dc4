# Turns a Lua script of the Redis store into a C header that defines it as
# one string literal, at build time (server/CMakeLists.txt; the fuzz and
# bench scripts that compile the store by hand run it too):
#
#   cmake -DIN=redis_script.lua -DOUT=redis_script.lua.h -P lua_embed.cmake
#
# defines RLS_LUA_REDIS_SCRIPT (RLS_LUA_ and the file's name in capitals).
#
# The script goes to Redis as ONE line, its statements separated by single
# spaces, so that its SHA does not depend on how the file is laid out: each
# line loses its leading and trailing blanks and is followed by one space;
# blank lines and comment lines ("-- ...") are left out. A first line "#!"
# (Redis's flags line) keeps its newline. A comment after code on the same
# line is refused: on one line it would silence the rest of the script.
cmake_minimum_required(VERSION 3.18)

if(NOT DEFINED IN OR NOT DEFINED OUT)
  message(FATAL_ERROR
          "usage: cmake -DIN=x.lua -DOUT=x.lua.h -P lua_embed.cmake")
endif()
get_filename_component(base "${IN}" NAME_WE)
string(TOUPPER "RLS_LUA_${base}" name)

file(READ "${IN}" text)
string(REGEX REPLACE "[ \t\r]+\n" "\n" text "\n${text}\n")
string(REGEX REPLACE "\n[ \t]+" "\n" text "${text}")
string(REGEX REPLACE "\n--[^\n]*" "" text "${text}")
string(REGEX REPLACE "\n\n+" "\n" text "${text}")
if(text MATCHES "--")
  message(FATAL_ERROR "${IN}: a comment after code (\"--\" within a line)")
endif()

# The flags line, if any, with its newline.
string(REGEX MATCH "^\n#![^\n]*" flags "${text}")
string(LENGTH "${flags}" skip)
if(skip EQUAL 0)
  set(skip 1)
else()
  string(SUBSTRING "${flags}" 1 -1 flags)
  set(flags "    \"${flags}\\n\" \\\n")
  math(EXPR skip "${skip} + 1")
endif()
string(SUBSTRING "${text}" ${skip} -1 text)
if(text STREQUAL "")
  message(FATAL_ERROR "${IN}: no code")
endif()

# A C string literal per line; \? keeps "??" from reading as a trigraph.
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "?" "\\?" text "${text}")
string(REGEX REPLACE "([^\n]*)\n" "    \"\\1 \" \\\\\n" text "${text}")

file(WRITE "${OUT}.tmp"
     "/* Generated from ${base}.lua by lua_embed.cmake: do not edit. */\n"
     "#define ${name} \\\n${flags}${text}\n")
# Rewritten only when it changed, so that nothing recompiles for nothing.
configure_file("${OUT}.tmp" "${OUT}" COPYONLY)
file(REMOVE "${OUT}.tmp")
