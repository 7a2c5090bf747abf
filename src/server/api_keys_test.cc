// API keys: the key file's rules (comments, blank lines, one-line errors naming the line),
// the bearer header, and the comparison that accepts exactly the configured keys.
#include "server/api_keys.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace mt::server {
namespace {

TEST(ApiKeysTest, AcceptsExactlyTheConfiguredKeys) {
  const std::vector<std::string> keys = {"sk-first-key", "second"};
  EXPECT_TRUE(ApiKeyMatches("sk-first-key", keys));
  EXPECT_TRUE(ApiKeyMatches("second", keys));
  const std::vector<std::string> wrongs = {"",
                                           "sk-first-ke",
                                           "sk-first-key2",
                                           "sk-first-kez",
                                           "Sk-first-key",
                                           "secon",
                                           "seconds",
                                           "sk-first-keysecond",
                                           std::string("second\0", 7)};
  for (const std::string& wrong : wrongs) {
    EXPECT_FALSE(ApiKeyMatches(wrong, keys)) << "'" << wrong << "'";
  }
  EXPECT_FALSE(ApiKeyMatches("anything", {}));
  // A difference only in the first or only in the last byte is found alike.
  EXPECT_FALSE(ApiKeyMatches("xk-first-key", keys));
  EXPECT_FALSE(ApiKeyMatches("sk-first-kex", keys));
}

TEST(ApiKeysTest, BearerToken) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("bearer abc"), "abc");
  EXPECT_EQ(BearerToken("BEARER   abc  "), "abc");
  EXPECT_EQ(BearerToken("Basic YWxhZGRpbjpvcGVuc2VzYW1l"), "");
  EXPECT_EQ(BearerToken("Bearer"), "");
  EXPECT_EQ(BearerToken("abc"), "");
  EXPECT_EQ(BearerToken(""), "");
}

TEST(ApiKeysTest, ParsesAKeyFile) {
  auto keys = ParseApiKeys("# team keys\n\nsk-one\n  sk-two  \r\n\t# old: sk-zero\nsk-three", "k");
  ASSERT_TRUE(keys.ok()) << keys.status().message();
  EXPECT_EQ(keys.value(), (std::vector<std::string>{"sk-one", "sk-two", "sk-three"}));
}

TEST(ApiKeysTest, KeyFileErrorsNameTheFileAndLine) {
  auto empty = ParseApiKeys("# nothing here\n\n   \n", "/etc/keys");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(),
            "/etc/keys: no API key in the file (one key per line; # starts a comment)");
  EXPECT_FALSE(ParseApiKeys("", "/etc/keys").ok());

  auto spaced = ParseApiKeys("sk-one\nsk two\n", "/etc/keys");
  ASSERT_FALSE(spaced.ok());
  EXPECT_EQ(spaced.status().message(),
            "/etc/keys:2: an API key must be printable ASCII without spaces (one key per line)");
  auto binary = ParseApiKeys("sk-\x01one\n", "/etc/keys");
  ASSERT_FALSE(binary.ok());
  EXPECT_NE(binary.status().message().find("/etc/keys:1:"), std::string::npos);
  EXPECT_FALSE(ParseApiKeys("sk-\xc3\xa9t\xc3\xa9\n", "k").ok());  // not ASCII
}

TEST(ApiKeysTest, ReadsAKeyFileOrSaysWhyNot) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("api-keys-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "keys").string();
  std::ofstream(good) << "# comment\nsk-abc\n";
  auto keys = ReadApiKeyFile(good);
  ASSERT_TRUE(keys.ok()) << keys.status().message();
  EXPECT_EQ(keys.value(), std::vector<std::string>{"sk-abc"});

  auto missing = ReadApiKeyFile((dir / "nope").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--api-key-file"), std::string::npos);
  EXPECT_NE(missing.status().message().find("nope: no such file"), std::string::npos);

  auto directory = ReadApiKeyFile(dir.string());
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find("is a directory"), std::string::npos);

  const std::string blank = (dir / "blank").string();
  std::ofstream(blank) << "\n# only a comment\n";
  auto none = ReadApiKeyFile(blank);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no API key in the file"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(ApiKeysTest, CommandLineKeysAreChecked) {
  EXPECT_TRUE(CheckApiKey("sk-123", "--api-key").ok());
  EXPECT_EQ(CheckApiKey("", "--api-key").message(), "--api-key: the key is empty");
  EXPECT_EQ(CheckApiKey("a b", "--api-key").message(),
            "--api-key: an API key must be printable ASCII without spaces");
}

TEST(ApiKeysTest, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h : {"0.0.0.0", "192.168.1.4", "::", "128.0.0.1", "example.com", ""}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

}  // namespace
}  // namespace mt::server
