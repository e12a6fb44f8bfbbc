// test_profile.cpp -- AMPX_PROFILE's table (core/profile.h): calls and
// times summed per kind, a call inside another listed under it and counted
// only in the outer one's time, details outside a timed call and scopes
// without a profile recording nothing, the outermost kinds sorted by time.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/profile.h"

using ampx::impl::PrimitiveProfile;
using ampx::impl::ProfileScope;

namespace {

struct Row {
  double ms;
  long long calls;
  std::string kind;
};

// The table's rows, and its first line.
std::vector<Row> read_table(const std::string& path, std::string* header) {
  std::ifstream in(path);
  std::string line;
  std::vector<Row> rows;
  const std::string prefix = "ampx profile: ";
  while (std::getline(in, line)) {
    if (line.rfind("ampx profile (", 0) == 0) {
      *header = line;
      continue;
    }
    REQUIRE(line.rfind(prefix, 0) == 0);
    std::istringstream fields(line.substr(prefix.size()));
    std::string first;
    fields >> first;
    if (first == "ms" || first == "end") continue;
    Row row{std::stod(first), 0, ""};
    fields >> row.calls;
    std::getline(fields >> std::ws, row.kind);
    rows.push_back(row);
  }
  return rows;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

TEST_CASE("profile: calls and times per kind, details under their call, sorted by time") {
  char path[] = "/tmp/ampx_profile_test_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  {
    PrimitiveProfile profile("CPU", path);
    {
      const ProfileScope outside("a detail outside any call");  // records nothing
      const ProfileScope nowhere(nullptr, "no profile");          // records nothing
    }
    {
      const ProfileScope conv(&profile, "conv2d_forward", "f32");
      for (int i = 0; i < 2; ++i) {
        const ProfileScope reorder("oneDNN reorder");
        sleep_ms(3);
      }
      sleep_ms(20);
    }
    for (int i = 0; i < 2; ++i) {
      const ProfileScope relu(&profile, "unary", "relu");
      sleep_ms(1);
    }
  }
  std::string header;
  const std::vector<Row> rows = read_table(path, &header);
  std::remove(path);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].kind == "conv2d_forward f32");
  CHECK(rows[0].calls == 1);
  CHECK(rows[1].kind == "conv2d_forward f32 > oneDNN reorder");
  CHECK(rows[1].calls == 2);
  CHECK(rows[2].kind == "unary relu");
  CHECK(rows[2].calls == 2);
  CHECK(rows[1].ms >= 6.0);
  CHECK(rows[0].ms >= rows[1].ms + 20.0);
  CHECK(rows[2].ms >= 2.0);
  // The total counts the outer calls only: 3 of them, the details inside.
  CHECK_MESSAGE(header.find("CPU backend): 3 primitive calls") != std::string::npos, header);
  const double total = std::stod(header.substr(header.find("calls, ") + 7));
  CHECK(total == doctest::Approx(rows[0].ms + rows[2].ms).epsilon(1e-3));
}
