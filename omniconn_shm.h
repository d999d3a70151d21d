/* omniconn_shm.h - v0.1.0 - placeholder - SPDX-License-Identifier: MIT OR Unlicense
   Work in progress: see the issue tracker. Includes omniconn.h. */
#ifndef OMNICONN_SHM_H_INCLUDED
#define OMNICONN_SHM_H_INCLUDED
#include "omniconn.h"
#endif
