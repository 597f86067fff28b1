// Plain-text tables for the CLI's listings (kiln keys list, kiln audit).
#pragma once

#include <string>
#include <vector>

namespace kiln::cli {

// Prints rows as left-aligned columns two spaces apart, to stdout.
void PrintTable(const std::vector<std::vector<std::string>>& rows);

}  // namespace kiln::cli
