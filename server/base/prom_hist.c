/* Bucket bounds of the server's histograms (hist.h). */
#include "base/prom_hist.h"

const uint64_t rls_rtt_bounds_us[12] = {50,   100,   250,   500,   1000,  2500,
                                        5000, 10000, 25000, 50000, 100000,
                                        250000};
const uint64_t rls_batch_bounds[11] = {1,  2,   4,   8,   16,  32,
                                       64, 128, 256, 512, 1024};
