# Checks ampx.dll's export and import tables (objdump -p):
#  - the exported names are exactly the functions ampx.h declares AMPX_API
#    (both tiers: the library defines the experimental one too), and the
#    .def file lists the same names;
#  - every imported DLL is a system DLL of Windows itself: the MinGW runtime
#    (libstdc++, libgcc, winpthreads) is linked in, so ampx.dll runs where
#    nothing but Windows is installed.
#   cmake -DDLL=ampx.dll -DDEF=ampx.def -DHEADER=ampx.h -DOBJDUMP=objdump -P check_pe_tables.cmake
execute_process(COMMAND ${OBJDUMP} -p ${DLL} OUTPUT_VARIABLE table RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${OBJDUMP} -p failed on ${DLL}")
endif()

file(READ ${HEADER} header)
string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" header "${header}")  # comments
string(REGEX MATCHALL "AMPX_API[^;{}()]*[ *](ampx_[a-z0-9_]+)[ ]*\\(" declarations "${header}")
set(declared "")
foreach(declaration IN LISTS declarations)
  string(REGEX MATCH "(ampx_[a-z0-9_]+)[ ]*\\($" name "${declaration}")
  list(APPEND declared "${CMAKE_MATCH_1}")
endforeach()
list(REMOVE_DUPLICATES declared)
list(SORT declared)

# The export table's name list ("[Ordinal/Name Pointer] Table", then
# "\t[   0] name" lines).
string(REGEX MATCH "\\[Ordinal/Name Pointer\\] Table\n(\t\\[ *[0-9]+\\] [^\n]+\n)+" names "${table}")
string(REGEX MATCHALL "\t\\[ *[0-9]+\\] [^\n]+" entries "${names}")
set(exported "")
foreach(entry IN LISTS entries)
  string(REGEX REPLACE "^\t\\[ *[0-9]+\\] " "" name "${entry}")
  list(APPEND exported "${name}")
endforeach()
list(SORT exported)

file(STRINGS ${DEF} def_lines REGEX "^[ \t]+[A-Za-z_]")
set(defined "")
foreach(line IN LISTS def_lines)
  string(REGEX MATCH "[A-Za-z_][A-Za-z0-9_]*" name "${line}")
  list(APPEND defined "${name}")
endforeach()
list(SORT defined)

list(LENGTH declared declared_count)
list(LENGTH exported exported_count)
if(declared_count LESS 100)
  message(FATAL_ERROR "only ${declared_count} AMPX_API functions found in ${HEADER}")
endif()
if(NOT exported STREQUAL declared)
  set(extra ${exported})
  list(REMOVE_ITEM extra ${declared})
  set(missing ${declared})
  list(REMOVE_ITEM missing ${exported})
  message(FATAL_ERROR "ampx.dll's exports differ from ampx.h's functions:\n"
    "  exported, not declared: ${extra}\n  declared, not exported: ${missing}")
endif()
if(NOT defined STREQUAL exported)
  message(FATAL_ERROR "${DEF} does not list the DLL's exports")
endif()

# Windows' own DLLs: the kernel's, the C runtime every Windows has
# (msvcrt.dll), and the API sets (api-ms-win-*) that stand for them.
string(REGEX MATCHALL "DLL Name: [^\n]+" imports "${table}")
set(imported "")
set(bad "")
foreach(entry IN LISTS imports)
  string(SUBSTRING "${entry}" 10 -1 name)
  string(TOLOWER "${name}" lower)
  list(APPEND imported "${name}")
  if(NOT lower MATCHES "^(kernel32|ntdll|user32|advapi32|ws2_32|bcrypt|shell32|ole32|msvcrt|ucrtbase)\\.dll$|^api-ms-win-")
    list(APPEND bad "${name}")
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "ampx.dll imports DLLs that are not Windows' own: ${bad} (all: ${imported})")
endif()
message(STATUS "ampx.dll: ${exported_count} exports, exactly ampx.h's functions and ampx.def's; "
  "imports ${imported} only")
