/**
 * Every command of `workbench`: its name, a one-line summary and how to load it. Nothing here imports a
 * command's module: main.ts loads one only when it runs (or its help is asked for), so the usage costs
 * this file alone. Its own module so tests can list the commands without running main.
 */
import type { Command } from './args.js';

export interface CommandEntry {
  summary: string;
  load: () => Promise<Command>;
}

/** Every command, in the order the usage lists them. */
export const COMMANDS: Record<string, CommandEntry> = {
  up: {
    summary: 'start a local cluster of a phase behind Traefik or HAProxy',
    load: async () => (await import('./commands/cluster.js')).upCommand,
  },
  down: {
    summary: 'stop the local cluster started here',
    load: async () => (await import('./commands/cluster.js')).downCommand,
  },
  node: {
    summary: 'crash (kill), drain (stop) or restart (start) one node of the local cluster',
    load: async () => (await import('./commands/cluster.js')).nodeCommand,
  },
  restart: {
    summary: 'restart every node in turn: drain, wait for its sessions elsewhere, start, wait for health',
    load: async () => (await import('./commands/restart.js')).restartCommand,
  },
  region: {
    summary: 'cut, restore or promote a region of the two-region simulation (up --phase 4)',
    load: async () => (await import('./commands/region.js')).regionCommand,
  },
  promote: {
    summary: "health, smoke, flip to a phase's flags, smoke again; roll back on failure",
    load: async () => (await import('./commands/promote.js')).promoteCommand,
  },
  rollback: {
    summary: 'back to the phase before the last promotion',
    load: async () => (await import('./commands/promote.js')).rollbackCommand,
  },
  status: {
    summary: 'nodes, flags, ownership, audit chains; exit 1 if unhealthy',
    load: async () => (await import('./commands/status.js')).statusCommand,
  },
  console: {
    summary: "the local cluster's console page on 127.0.0.1",
    load: async () => (await import('./commands/console.js')).consoleCommand,
  },
  smoke: {
    summary: "run the smoke checks against a phase's expectations",
    load: async () => (await import('./commands/smoke.js')).smokeCommand,
  },
  flags: {
    summary: "list, set or seed an environment's flags (file or Unleash provider)",
    load: async () => (await import('./commands/flags.js')).flagsCommand,
  },
  broker: {
    summary: 'run one broker node (configured from the environment, see README)',
    load: async () => (await import('./commands/broker.js')).brokerCommand,
  },
  migrate: {
    summary: 'create the database if needed and apply the migrations',
    load: async () => (await import('./commands/migrate.js')).migrateCommand,
  },
  mesh: {
    summary: 'create a mesh with K members and fresh ed25519 keys',
    load: async () => (await import('./commands/mesh.js')).meshCommand,
  },
  mcp: {
    summary: 'host a stdio MCP server on the mesh, or serve every tool of the mesh over stdio MCP',
    load: async () => (await import('./commands/mcp.js')).mcpCommand,
  },
  audit: {
    summary: "verify every mesh's audit chain, once or following (the independent verifier)",
    load: async () => (await import('./commands/audit.js')).auditCommand,
  },
  load: {
    summary: 'synthetic peers with a delivery checker',
    load: async () => (await import('./commands/load.js')).loadCommand,
  },
  fuzz: {
    summary: 'seeded bad frames, HTTP requests and resource abuse against one node',
    load: async () => (await import('./commands/fuzz.js')).fuzzCommand,
  },
  chaos: {
    summary: 'a throw-away cluster under load hit by seeded faults',
    load: async () => (await import('./commands/chaos.js')).chaosCommand,
  },
  soak: {
    summary: 'the nightly matrix: every planted bug × seeds of chaos, then a long soak',
    load: async () => (await import('./commands/soak.js')).soakCommand,
  },
};
