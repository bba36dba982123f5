// Placeholder: being implemented.
#include "tilus/ir/simplify.h"
