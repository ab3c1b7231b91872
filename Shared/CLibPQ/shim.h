#ifndef SYNCLINE_CLIBPQ_SHIM_H
#define SYNCLINE_CLIBPQ_SHIM_H
#include <libpq-fe.h>
#endif
