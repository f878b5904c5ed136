#include "sqs/driver.hpp"
int f() { return sluice::sqs::x; }
