// Each enumeration's one table of names (EnumNames, <posenc/enums.h>): names and values unique,
// every name read back to its value (detail::enum_value, what the operators' string arguments,
// posenc.nn's JSON options and the program read), operator<< printing the table's name, and the
// lists the messages are made of.

#include "detail/enum_names.h"

#include <posenc/enums.h>

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <sstream>
#include <string>

namespace {

template <typename E>
void expect_table_round_trips() {
  std::set<std::string> names;
  std::set<int> values;
  for (const posenc::EnumName<E>& entry : posenc::EnumNames<E>::values) {
    EXPECT_TRUE(names.insert(entry.name).second) << "name " << entry.name << " twice";
    EXPECT_TRUE(values.insert(static_cast<int>(entry.value)).second) << entry.name;
    EXPECT_STREQ(posenc::enum_name(entry.value), entry.name);
    const c10::optional<E> read = posenc::detail::enum_value<E>(entry.name);
    ASSERT_TRUE(read.has_value()) << entry.name;
    EXPECT_EQ(*read, entry.value);
    std::ostringstream printed;
    printed << entry.value;
    EXPECT_EQ(printed.str(), entry.name);
  }
  EXPECT_FALSE(posenc::detail::enum_value<E>("").has_value());
  EXPECT_FALSE(posenc::detail::enum_value<E>("no such name").has_value());
  // (names are read exactly: no case folding)
  const std::string first = posenc::EnumNames<E>::values.front().name;
  std::string upper = first;
  for (char& c : upper) {
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  EXPECT_FALSE(posenc::detail::enum_value<E>(upper).has_value()) << upper;
}

TEST(EnumNames, EveryTableRoundTrips) {
  expect_table_round_trips<posenc::ChannelLayout>();
  expect_table_round_trips<posenc::FrequencySpacing>();
  expect_table_round_trips<posenc::BeyondMaxLen>();
  expect_table_round_trips<posenc::RotaryPairing>();
  expect_table_round_trips<posenc::Interpolation>();
  expect_table_round_trips<posenc::GridIndexing>();
  expect_table_round_trips<posenc::PositionKind>();
  expect_table_round_trips<posenc::AttentionTemperatureForm>();
}

TEST(EnumNames, NamesAsTheMessagesListThem) {
  EXPECT_EQ(posenc::detail::enum_alternatives<posenc::GridIndexing>("'"), "'ij' or 'xy'");
  EXPECT_EQ(posenc::detail::enum_alternatives<posenc::Interpolation>("\""),
            "\"bicubic\", \"bilinear\" or \"nearest\"");
  EXPECT_EQ(posenc::detail::enum_names_list<posenc::RotaryPairing>("'"),
            "'half_split', 'interleaved'");
}

TEST(EnumNames, TheNamedFunctionsReadTheTable) {
  EXPECT_STREQ(posenc::grid_indexing_name(posenc::GridIndexing::kXY), "xy");
  EXPECT_STREQ(posenc::interpolation_name(posenc::Interpolation::kNearest), "nearest");
  EXPECT_STREQ(posenc::attention_temperature_form_name(posenc::AttentionTemperatureForm::kMinistral3),
               "ministral3");
}

} // namespace
