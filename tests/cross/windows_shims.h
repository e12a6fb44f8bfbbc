// windows_shims.h -- the few POSIX C library calls the unit tests make
// (scratch directories, environment variables), for MinGW-w64, whose C
// library spells them otherwise. Included before every unit test source of
// a Windows build (tests/cross/CMakeLists.txt), so the tests stay as they
// are on Linux.
#pragma once

#include <direct.h>
#include <stdlib.h>
#include <string.h>

inline char* mkdtemp(char* pattern) {
  if (_mktemp_s(pattern, strlen(pattern) + 1) != 0 || _mkdir(pattern) != 0) return nullptr;
  return pattern;
}

inline int setenv(const char* name, const char* value, int overwrite) {
  if (!overwrite && getenv(name) != nullptr) return 0;
  return _putenv_s(name, value) == 0 ? 0 : -1;
}

// An empty value removes the variable (_putenv_s's rule).
inline int unsetenv(const char* name) { return _putenv_s(name, "") == 0 ? 0 : -1; }
