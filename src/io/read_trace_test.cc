#include "io/read_trace.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "io/io_test_util.h"

namespace mt {
namespace {

using io_test::CollectAll;
using io_test::RandomBytes;
using io_test::TempFile;

TEST(ReadTraceTest, FormatThenParseGivesTheSameTrace) {
  ReadTrace t;
  t.files = {"/models/a b.gguf", "/models/c-00002-of-00002.gguf"};
  t.reads = {{0, 4096, 1 << 20}, {1, 0, 8192}, {0, uint64_t{5} << 40, kMaxReadLength}};
  Result<std::string> text = FormatReadTrace(t);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->substr(0, text->find('\n')), "moetier-read-trace 1");
  Result<ReadTrace> back = ParseReadTrace(*text);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->files, t.files);
  ASSERT_EQ(back->reads.size(), t.reads.size());
  for (size_t i = 0; i < t.reads.size(); ++i) {
    EXPECT_EQ(back->reads[i].file, t.reads[i].file);
    EXPECT_EQ(back->reads[i].offset, t.reads[i].offset);
    EXPECT_EQ(back->reads[i].length, t.reads[i].length);
  }
}

TEST(ReadTraceTest, APathWithALineBreakIsRefused) {
  ReadTrace t;
  t.files = {"bad\nname"};
  EXPECT_FALSE(FormatReadTrace(t).ok());
}

TEST(ReadTraceTest, BadTracesFailNamingTheLine) {
  const std::string h = "moetier-read-trace 1\n";
  const std::pair<std::string, std::string> cases[] = {
      {"", "read trace: empty"},
      {"moetier-read-trace 2\n", "line 1: expected 'moetier-read-trace 1'"},
      {h + "file 1 /a\n", "line 2: expected file index 0"},
      {h + "file 0\n", "line 2: file 0 has no path"},
      {h + "file 0 /a\nread 1 0 4096\n", "line 3: file index 1 is not defined"},
      {h + "file 0 /a\nread 0 x 4096\n", "line 3: expected 'read FILE OFFSET LENGTH'"},
      {h + "file 0 /a\nread 0 0\n", "line 3: expected 'read FILE OFFSET LENGTH'"},
      {h + "file 0 /a\nread 0 0 4096 9\n", "line 3: expected 'read FILE OFFSET LENGTH'"},
      {h + "file 0 /a\nread 0 0 99999999999999999999\n", "line 3: expected"},
      {h + "file 0 /a\nread 0 0 0\n", "line 3: length 0 is not in 1 .."},
      {h + "file 0 /a\nread 0 0 1073741825\n", "line 3: length 1073741825 is not in"},
      {h + "\nwrite 0 0 1\n", "line 3: unknown item 'write'"},
  };
  for (const auto& [text, want] : cases) {
    Result<ReadTrace> r = ParseReadTrace(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos)
        << text << " -> " << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "one line";
  }
}

TEST(TracingEngineTest, RecordsTheOpsSubmittedWhileRecordingAndPassesEverythingOn) {
  const std::vector<uint8_t> content = RandomBytes(16 * 4096, 7);
  TempFile file(std::filesystem::temp_directory_path().string(), content);
  Result<std::unique_ptr<IoEngine>> inner = CreatePreadEngine(2);
  ASSERT_TRUE(inner.ok());
  TracingEngine engine(std::move(inner).value());
  const int f = engine.AddFile(file.path(), DirectMode::kOff).value();
  std::vector<uint8_t> dst(3 * 4096);
  auto read = [&](uint64_t block, uint64_t tag) {
    ReadOp op{f, block * 4096, 4096, dst.data() + tag * 4096, tag};
    EXPECT_TRUE(engine.Submit({&op, 1}).ok());
  };

  read(5, 0);  // before recording: not in the trace
  engine.SetRecording(true);
  read(2, 1);
  ReadOp unknown{f + 1, 0, 4096, dst.data(), 9};  // an unknown file reads nothing
  ASSERT_TRUE(engine.Submit({&unknown, 1}).ok());
  read(9, 2);
  engine.SetRecording(false);
  std::map<uint64_t, int64_t> results = CollectAll(engine, 4);
  EXPECT_EQ(results[0], 4096);
  EXPECT_EQ(results[1], 4096);
  EXPECT_EQ(results[2], 4096);
  EXPECT_LT(results[9], 0);
  EXPECT_EQ(std::memcmp(dst.data() + 4096, content.data() + 2 * 4096, 4096), 0);
  EXPECT_EQ(std::memcmp(dst.data() + 2 * 4096, content.data() + 9 * 4096, 4096), 0);

  const ReadTrace t = engine.trace();
  ASSERT_EQ(t.files.size(), 1u);
  EXPECT_EQ(t.files[0], file.path());
  ASSERT_EQ(t.reads.size(), 2u);
  EXPECT_EQ(t.reads[0].offset, 2u * 4096);
  EXPECT_EQ(t.reads[1].offset, 9u * 4096);
  EXPECT_EQ(t.reads[1].length, 4096u);

  engine.SetRecording(true);  // a new recording starts empty
  EXPECT_TRUE(engine.trace().reads.empty());
  EXPECT_EQ(engine.name(), "pread");
}

}  // namespace
}  // namespace mt
