/* linerate-target: the iSCSI target daemon. Everything lives in src/daemon (command line,
 * config file, reactors, listeners, shutdown); this is only the entry point. */
#include "daemon/config.h"

int main(int argc, char **argv)
{
    return target_main(argc, argv);
}
