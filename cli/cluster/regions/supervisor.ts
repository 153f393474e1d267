/**
 * How `workbench up --phase 4` runs the simulation. The links are sockets of one process, so that process
 * must outlive the command: `up` starts itself again with `--foreground`, detached, logging to
 * `.workbench/logs/regions.log`, and returns once that process says the regions are up (or why not).
 * `--foreground` runs it in the terminal instead: Ctrl-C stops everything.
 *
 * The supervisor serves the control socket (./control.ts) and stops everything on SIGTERM (what
 * `workbench down` sends) or SIGINT. Until it is up, a signal runs the registered last-resort cleanups
 * (cli/cluster/exit-cleanup.ts) and kills it, so an interrupted start leaves nothing either.
 */
import { rmSync } from 'node:fs';
import type { Server } from 'node:net';
import { join } from 'node:path';
import { spawnWorkbench } from '../broker-process.js';
import {
  type ClusterFile,
  ensurePrivateStateDir,
  openPrivateLog,
  readCluster,
  refuseRunningCluster,
  requireHaproxy,
  stateDir,
} from '../local.js';
import { type ControlRequest, checkControlPath, serveControl } from './control.js';
import { RegionSimulation, type SimulationOptions } from './simulation.js';

export const controlPath = (cwd: string) => join(stateDir(cwd), 'regions.sock');

type Message = { ready: ClusterFile } | { error: string };

/** Runs the simulation in this process until SIGTERM/SIGINT; `ready` is told once it is up. */
export async function runSupervisor(
  options: Omit<SimulationOptions, 'controlPath'>,
  ready: (cluster: ClusterFile) => void,
): Promise<void> {
  const path = controlPath(options.cwd);
  checkControlPath(path);
  refuseRunningCluster(options.cwd);
  requireHaproxy();
  const simulation = await RegionSimulation.start({ ...options, controlPath: path });
  let control: Server | undefined;
  try {
    control = await serveControl(path, (request) => handle(simulation, request));
  } catch (error) {
    await simulation.stop();
    throw error;
  }
  // The links and the control socket keep the loop alive; this says so even if one is unref'd.
  const keepAlive = setInterval(() => {}, 1 << 30);
  process.once('exit', (code) => console.error(`supervisor exiting (code ${code})`));
  const stopped = new Promise<void>((resolve) => {
    const shutdown = async (signal: NodeJS.Signals) => {
      console.error(`supervisor: ${signal}, stopping everything`);
      clearInterval(keepAlive);
      control?.close();
      rmSync(path, { force: true });
      await simulation.stop();
      resolve();
    };
    process.once('SIGTERM', shutdown);
    process.once('SIGINT', shutdown);
  });
  ready(readCluster(options.cwd)!);
  await stopped;
}

function handle(simulation: RegionSimulation, request: ControlRequest): Promise<unknown> {
  const region = () => {
    if (typeof request.region !== 'string') throw new Error(`"${request.op}" needs a region`);
    return request.region;
  };
  const service = request.service === undefined ? undefined : String(request.service);
  switch (request.op) {
    case 'cut':
      return Promise.resolve({ links: simulation.cut(region(), service) });
    case 'restore':
      return Promise.resolve({ links: simulation.restore(region(), service) });
    case 'kill-primary':
      return simulation.killPrimary().then((killed) => ({ region: killed }));
    case 'promote':
      return simulation.promote(region());
    case 'rejoin':
      return simulation.rejoin(region());
    case 'status':
      return simulation.status();
    default:
      throw new Error(`unknown control operation "${String(request.op)}"`);
  }
}

/**
 * Starts the supervisor detached (`args` are `up`'s own, plus `--foreground`) and resolves with the cluster
 * once it is up; rejects with its error (it has then cleaned up). Ctrl-C while waiting stops it.
 */
export async function launchSupervisor(cwd: string, args: string[]): Promise<ClusterFile> {
  const dir = ensurePrivateStateDir(cwd);
  const child = spawnWorkbench(['up', ...args, '--foreground'], {
    cwd,
    output: openPrivateLog(dir, 'regions.log'),
    detached: true,
    ipc: true,
  });
  const interrupt = () => child.kill('SIGTERM');
  process.once('SIGINT', interrupt);
  process.once('SIGTERM', interrupt);
  try {
    return await new Promise<ClusterFile>((resolve, reject) => {
      child.once('message', (message: Message) => {
        if ('ready' in message) resolve(message.ready);
        else reject(new Error(message.error));
      });
      child.once('exit', (code, signal) =>
        reject(
          new Error(
            `the simulation stopped while starting (${signal ?? `exit ${code}`}); see .workbench/logs/regions.log`,
          ),
        ),
      );
    });
  } finally {
    process.off('SIGINT', interrupt);
    process.off('SIGTERM', interrupt);
    if (child.connected) child.disconnect();
    child.unref();
  }
}

/** In the supervisor: tells the `up` that launched it (if any) how the start went. */
export function tellLauncher(message: Message): void {
  if (process.send) {
    process.send(message);
    process.disconnect();
  }
}
