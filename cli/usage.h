// The usage of each `hetps` command: what `hetps COMMAND --help` prints, what a wrong argument
// shows (that command's only), and the overview `hetps --help` gives.
#pragma once

#include <string>
#include <vector>

namespace hetps {

struct CommandUsage {
  const char* name;     // "launch"
  const char* summary;  // one line, for the overview
  const char* text;     // "usage: hetps launch ...", then what it does
};

// Every command, in the order the overview lists them.
const std::vector<CommandUsage>& Commands();
const CommandUsage* FindCommand(const std::string& name);  // nullptr: no such command
std::string Overview();

// `--name value` made `--name=value` for the flags of `value_flags` (those that take a value),
// so that every command takes both spellings.
std::vector<std::string> JoinFlagValues(const std::vector<std::string>& args,
                                        const std::vector<std::string>& value_flags);
// Whether the arguments ask for the command's usage (--help, -h).
bool AsksForHelp(const std::vector<std::string>& args);

}  // namespace hetps
