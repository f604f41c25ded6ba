/* placeholder, replaced by the differential random-op client */
#include <stdio.h>
int main (void) { fprintf (stderr, "randops: not built yet\n"); return 1; }
