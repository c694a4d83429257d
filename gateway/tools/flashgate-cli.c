/* flashgate-cli: the command-line client of flashgate's WebSocket protocol v1
 * (docs/protocol.md), for people and for tests.
 *
 *   flashgate-cli chat    talk to the model interactively (stdin lines -> streamed text)
 *   flashgate-cli script  send scripted client events, print server events as JSON lines
 *   flashgate-cli load    N concurrent sessions x M turns: throughput, latency, memory
 *
 * The transport is gateway/client.h (libwebsockets, one service thread: this
 * one); events are written and read with gateway/client_events.h. Each mode
 * lives in its own header beside this file (cli_chat.h, cli_script.h,
 * cli_load.h), included here once, because every .c file in gateway/tools/
 * becomes an executable.
 */
#include "gateway/tools/cli_chat.h"
#include "gateway/tools/cli_common.h"
#include "gateway/tools/cli_load.h"
#include "gateway/tools/cli_script.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flashgate-cli MODE [options]\n"
            "\n"
            "modes:\n"
            "  chat     talk to the model: stdin lines in, streamed text out\n"
            "  script   send the client events of a script; print server events as JSON lines\n"
            "  load     concurrent sessions for throughput, latency and idle memory\n"
            "\n"
            "`flashgate-cli MODE --help` describes each. Common options: --url (default\n"
            "%s), --key (default $FLASHGATE_API_KEY, sent as\n"
            "\"Authorization: Bearer KEY\"), --subprotocol, -v.\n",
            CLI_DEFAULT_URL);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *mode = argv[1];
    if (!strcmp(mode, "-h") || !strcmp(mode, "--help") || !strcmp(mode, "help")) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    cli_install_signals();
    if (!strcmp(mode, "chat"))
        return chat_main(argc - 2, argv + 2);
    if (!strcmp(mode, "script"))
        return script_main(argc - 2, argv + 2);
    if (!strcmp(mode, "load"))
        return load_main(argc - 2, argv + 2);
    fprintf(stderr, "flashgate-cli: unknown mode \"%s\" (chat, script or load; see --help)\n", mode);
    return CLI_EXIT_USAGE;
}
