import { type ChildProcess, spawn } from 'node:child_process';
import { captured, WORKBENCH } from './cli.js';
import { freePort } from './ports.js';
import { waitFor } from './wait.js';

export interface VerifierProcess {
  process: ChildProcess;
  /** http://127.0.0.1:PORT (its /metrics). */
  url: string;
  port: number;
  output(): string;
  /**
   * Resolves once its output shows `text` (bounded). Its lines come through a pipe, its metrics through
   * HTTP: a gauge can be scraped before the line written just before it has been read here.
   */
  printed(text: string | RegExp): Promise<void>;
  exited: Promise<number | string | null>;
  /** SIGTERM, then the exit code. */
  stop(): Promise<number | string | null>;
}

/** `workbench audit verify --follow` as its own process, ready once its /metrics answers. */
export async function startVerifier(databaseUrl: string, args: string[] = []): Promise<VerifierProcess> {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [
      WORKBENCH,
      'audit',
      'verify',
      '--follow',
      '--metrics-port',
      String(port),
      '--database-url',
      databaseUrl,
      ...args,
    ],
    { env: { ...process.env, NODE_ID: `verifier-${port}` }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const { output, exited } = captured(child);
  const url = `http://127.0.0.1:${port}`;
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`verifier exited during start:\n${output()}`);
      return fetch(`${url}/metrics`).then(
        (r) => r.ok,
        () => false,
      );
    },
    { timeoutMs: 10_000, what: 'the verifier /metrics' },
  );
  return {
    process: child,
    url,
    port,
    output,
    async printed(text) {
      const shows = () => (typeof text === 'string' ? output().includes(text) : text.test(output()));
      await waitFor(shows, { timeoutMs: 5000, what: `the verifier to print ${String(text)}\n${output()}` });
    },
    exited,
    stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}

/** The value of one series in Prometheus text, matched by name and a subset of its labels. */
export function seriesValue(
  text: string,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) {
      return Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  }
  return undefined;
}

export async function scrape(url: string): Promise<string> {
  return (await fetch(`${url}/metrics`)).text();
}

/** Waits until the verifier's series `name` for `mesh` reads `expected` (its output in the error). */
export async function untilSeries(
  verifier: VerifierProcess,
  name: string,
  mesh: string,
  expected: number,
  timeoutMs = 15_000,
): Promise<void> {
  await waitFor(async () => seriesValue(await scrape(verifier.url), name, { mesh }) === expected, {
    timeoutMs,
    what: `${name}{mesh="${mesh}"} = ${expected}\n${verifier.output()}`,
  });
}
