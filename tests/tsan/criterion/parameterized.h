/* SPDX-License-Identifier: MIT */
/* Parameterized tests are part of the stand-in criterion.h. */
#include <criterion/criterion.h>
