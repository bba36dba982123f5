// Placeholder: being implemented.
#include "tilus/ir/layout.h"
