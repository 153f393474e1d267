#!/usr/bin/env node
/**
 * The `workbench` command. Each subcommand lives in its own module; this file only dispatches and turns
 * errors into messages and exit codes (1: the command failed, 2: it was called wrongly).
 */
import { ConfigError } from '../broker/config.js';
import { UsageError } from './args.js';
import { auditCommand } from './commands/audit.js';
import { brokerCommand } from './commands/broker.js';
import { chaosCommand } from './commands/chaos.js';
import { downCommand, nodeCommand, upCommand } from './commands/cluster.js';
import { consoleCommand } from './commands/console.js';
import { flagsCommand } from './commands/flags.js';
import { fuzzCommand } from './commands/fuzz.js';
import { loadCommand } from './commands/load.js';
import { meshCommand } from './commands/mesh.js';
import { migrateCommand } from './commands/migrate.js';
import { promoteCommand, rollbackCommand } from './commands/promote.js';
import { smokeCommand } from './commands/smoke.js';
import { statusCommand } from './commands/status.js';

const USAGE = `usage: workbench <command> [options]

commands:
  up [--phase N] [--nodes K] [--port P] [--lb haproxy|traefik]
                                  start a local cluster of phase N (default 3): brokers behind Traefik
                                  (when a traefik binary is on PATH) or HAProxy
  down                            stop the local cluster started here
  node kill|stop|start ID         crash (SIGKILL), drain (SIGTERM) or restart one node of the local cluster
  promote --env E --to N [--require-passed-in S] [--expectations FILE]
                                  health, smoke, flip to phase N's flags, smoke again; roll back on failure
  rollback --env E                back to the phase before the last promotion
  status [--env E] [--json]       nodes, flags, ownership, audit chains; exit 1 if unhealthy
  console [--port P]              the local cluster's console page on 127.0.0.1 (default port 8090)
  smoke --phase N [--env E] [--expectations FILE] [--only CHECK,CHECK]
                                  run the smoke checks; exit 1 if an expectation is not met
      --env E: environments/E.json in the working directory, else the local cluster (whose
      environment must then be E); without --env, the local cluster
  broker                          run one broker node (configured from the environment, see README)
  migrate [--database-url URL]    create the database if needed and apply the migrations
  mesh create NAME --members K [--out FILE] [--database-url URL]
                                  create a mesh with K members and fresh ed25519 keys
  audit verify [--mesh ID] [--checkpoint FILE] [--json] [--env E | --database-url URL]
                                  walk every mesh's audit chain from Postgres; exit 1 if one is broken
                                  (or, with --checkpoint, shorter than or diverging from the checkpoint)
  audit verify --follow [--checkpoint FILE] [--interval-ms N] [--rescan-ms N] [--metrics-port P] [--host H]
                                  the independent verifier: follow every chain, findings on its /metrics
  flags list --env E [--json]     each flag: the provider's value and what every live node acts on
  flags set KEY on|off --env E [--actor NAME]
                                  flip a flag (file or Unleash provider), read it back, audit it, push it
  flags seed --env E --phase N [--actor NAME]
                                  write phase N's flag preset into E's provider (Unleash: creating missing
                                  toggles), each flag read back and each change audited
      provider options: --provider file|unleash, --flags-dir DIR, --unleash-url URL,
      --unleash-token T, --unleash-environment NAME (default: development)
  load [--url URL | --nodes URL,URL] [--peers N] [--meshes M] [--dm-rate R] [--broadcast-rate R]
       [--stream-rate R] [--duration 30s] [--max-messages N] [--drain 5s] [--admin-token T] [--json]
                                  synthetic peers with a delivery checker; exit 1 if a message was
                                  lost, duplicated or reordered
  fuzz [--url URL --admin-token T] [--seed S] [--frames N] [--requests N] [--json]
       [--abuse amplification,slow-reader,flood|none] [--abuse-seconds 5] [--rss-bound-mib 100]
                                  seeded bad frames and HTTP requests, then resource abuse, against one
                                  node; exit 1 on a finding (an answer out of protocol, RSS past the bound)
  chaos --seed S [--duration 120s] [--faults N] [--json] [--keep]
                                  a throw-away cluster under load hit by seeded faults; exit 1 if a
                                  message was lost or duplicated, a chain broke, a schedule or tick repeated`;

const commands: Record<string, (argv: string[]) => Promise<number | undefined>> = {
  broker: brokerCommand,
  migrate: migrateCommand,
  mesh: meshCommand,
  audit: auditCommand,
  flags: flagsCommand,
  up: upCommand,
  smoke: smokeCommand,
  status: statusCommand,
  promote: promoteCommand,
  rollback: rollbackCommand,
  down: downCommand,
  node: nodeCommand,
  load: loadCommand,
  console: consoleCommand,
  fuzz: fuzzCommand,
  chaos: chaosCommand,
};

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    console.log(USAGE);
    return name === undefined ? 2 : 0;
  }
  const command = commands[name];
  if (!command) {
    console.error(`workbench: unknown command "${name}"\n\n${USAGE}`);
    return 2;
  }
  try {
    return (await command(rest)) ?? 0;
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(`workbench ${name}: ${error.message}\n\n${USAGE}`);
      return 2;
    }
    if (error instanceof ConfigError) {
      console.error(`workbench ${name}: configuration error: ${error.message}`);
      return 2;
    }
    console.error(`workbench ${name}: ${(error as Error).message}`);
    return 1;
  }
}

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
