/* linerate-target: the iSCSI target daemon. Everything lives in src/target (command line,
 * config file, reactors, listeners, shutdown); this is only the entry point. */
#include "target/target.h"

int main(int argc, char **argv)
{
    return target_main(argc, argv);
}
