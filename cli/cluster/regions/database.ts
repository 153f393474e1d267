/**
 * The database side of phase 4's simulation (docs/multi-region.md § Failover with Patroni): the etcd of
 * the witness site, one Patroni per region running that region's Postgres, and one database HAProxy per
 * region (./pg-balancer.ts) that brokers use as DATABASE_URL (writes: Patroni's leader) and
 * DATABASE_READ_URL (reads: the region's replica while it lags less than READ_LAG_BYTES, else the leader).
 *
 * Links (cli/proxies/latency-proxy.ts, made by the caller): every region reaches etcd through a link of its
 * own (`etcd`, to the witness), and every other region's Postgres (`postgres`, for brokers), replication
 * stream and pg_rewind (`replication`) and Patroni REST API (`patroni`, for HAProxy's checks and Patroni's
 * own calls) through links, so cutting a region also cuts its Patroni from etcd and from the others.
 * A member's connect addresses (what etcd tells the others) are the links from the first other region:
 * exact with two regions, the phase-4 file's shape.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { ensureDatabase, runMigrations } from '../../../broker/db/migrate.js';
import { freePort } from '../../ports.js';
import { openPrivateLog, type RegionsState } from '../local.js';
import { PatroniMember, type PatroniView, patroniGet, READ_LAG_BYTES, ThrowawayEtcd } from '../patroni.js';
import { pgBalancerConfig } from './pg-balancer.js';

export const DATABASE_NAME = 'workbench';
const WITNESS = 'witness';
/** HAProxy's check period of Patroni's REST API: a dead leader is out of the write backend in ~1 s. */
const CHECK_INTERVAL_MS = 500;

type LinkService = RegionsState['links'][number]['service'];

/** What the simulation lends: its links (the proxy's address), its cleanups, its log. */
export interface DatabaseLinks {
  link(from: string, to: string, service: LinkService, upstreamPort: number): Promise<string>;
  onCleanup(cleanup: () => void): void;
  say(line: string): void;
}

interface Ports {
  pg: number;
  rest: number;
}

interface Balancer {
  process: ChildProcess;
  writePort: number;
  readPort: number;
}

type RegionDatabaseState = Pick<RegionsState['list'][number], 'postgres' | 'patroni' | 'pgLb'>;

function killQuietly(pid: number | undefined): void {
  if (!pid) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

async function inRecovery(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r')).rows[0]!.r;
  } finally {
    await client.end().catch(() => {});
  }
}

export class RegionDatabases {
  private readonly members = new Map<string, PatroniMember>();
  private readonly balancers = new Map<string, Balancer>();
  private readonly views = new Map<string, PatroniView | undefined>();
  /** The region whose Patroni holds the leader key and runs Postgres as primary, as last seen. */
  leader: string | undefined;

  private constructor(
    private readonly etcd: ThrowawayEtcd,
    private readonly regions: string[],
    private readonly links: DatabaseLinks,
  ) {}

  static async start(
    options: { dir: string; regions: string[]; synchronous: boolean },
    links: DatabaseLinks,
  ): Promise<RegionDatabases> {
    const { dir, regions, synchronous } = options;
    links.say(`witness: etcd${synchronous ? ' (Patroni synchronous mode)' : ''}`);
    const etcd = await ThrowawayEtcd.start({
      dataDir: join(dir, 'etcd'),
      clientPort: await freePort(),
      peerPort: await freePort(),
      log: openPrivateLog(dir, 'etcd.log'),
    });
    links.onCleanup(() => etcd.destroy());
    const databases = new RegionDatabases(etcd, regions, links);
    const ports = new Map<string, Ports>();
    for (const region of regions) ports.set(region, { pg: await freePort(), rest: await freePort() });
    await databases.startMembers(ports, synchronous);
    await databases.startBalancers(dir, ports);
    await databases.refresh();
    return databases;
  }

  private async startMembers(ports: Map<string, Ports>, synchronous: boolean): Promise<void> {
    const { link, onCleanup, say } = this.links;
    const connect = new Map<string, { pg: string; rest: string }>();
    for (const region of this.regions) {
      const { pg: pgPort, rest } = ports.get(region)!;
      const others = this.regions.filter((r) => r !== region);
      for (const other of others) {
        await this.linkAddress(other, region, 'postgres', pgPort);
        const viaPg = await this.linkAddress(other, region, 'replication', pgPort);
        const viaRest = await this.linkAddress(other, region, 'patroni', rest);
        if (!connect.has(region)) connect.set(region, { pg: viaPg, rest: viaRest });
      }
    }
    for (const [index, region] of this.regions.entries()) {
      const { pg: pgPort, rest } = ports.get(region)!;
      const etcdAddress = await link(region, WITNESS, 'etcd', this.etcd.port);
      const role = index === 0 ? 'leader' : 'replica';
      say(
        `region ${region}: Patroni (${role === 'leader' ? 'bootstraps the leader' : 'replica through the link'})`,
      );
      const member = await PatroniMember.start(
        {
          scope: 'workbench',
          name: region,
          pgPort,
          restPort: rest,
          etcdAddress,
          pgConnectAddress: connect.get(region)!.pg,
          restConnectAddress: connect.get(region)!.rest,
          synchronous,
        },
        role,
      );
      onCleanup(() => member.destroy());
      this.members.set(region, member);
      if (index === 0) {
        await ensureDatabase(member.urlOf(DATABASE_NAME));
        await runMigrations(member.urlOf(DATABASE_NAME));
      }
    }
    if (synchronous) await this.synchronousStandby(this.members.get(this.regions[0]!)!);
  }

  /** Synchronous mode: resolves once the leader names a synchronous standby (Patroni sets it a loop later). */
  private async synchronousStandby(leader: PatroniMember): Promise<void> {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const view = await leader.view();
      if (view?.replication?.some((r) => r.sync_state === 'sync')) return;
      if (Date.now() > deadline) throw new Error('Patroni named no synchronous standby within 30 s');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  private async startBalancers(dir: string, ports: Map<string, Ports>): Promise<void> {
    for (const region of this.regions) {
      const servers = [];
      for (const other of this.regions) {
        const own = other === region;
        const { pg: pgPort, rest } = ports.get(other)!;
        servers.push({
          region: other,
          // The links startMembers made: HAProxy's checks and brokers share them with Patroni.
          postgres: own ? `127.0.0.1:${pgPort}` : await this.linkAddress(region, other, 'postgres', pgPort),
          rest: own ? `127.0.0.1:${rest}` : await this.linkAddress(region, other, 'patroni', rest),
        });
      }
      const writePort = await freePort();
      const readPort = await freePort();
      const cfg = join(dir, `haproxy-pg-${region}.cfg`);
      writeFileSync(
        cfg,
        pgBalancerConfig({
          writeBind: `127.0.0.1:${writePort}`,
          readBind: `127.0.0.1:${readPort}`,
          servers,
          region,
          readLagBytes: READ_LAG_BYTES,
          checkIntervalMs: CHECK_INTERVAL_MS,
        }),
        { mode: 0o600 },
      );
      const check = spawnSync('haproxy', ['-c', '-q', '-f', cfg], { encoding: 'utf8' });
      if (check.status !== 0) throw new Error(`generated HAProxy configuration is invalid:\n${check.stderr}`);
      const log = openPrivateLog(dir, `haproxy-pg-${region}.log`);
      const child = spawn('haproxy', ['-db', '-f', cfg], { detached: true, stdio: ['ignore', log, log] });
      closeSync(log);
      child.unref();
      this.links.onCleanup(() => killQuietly(child.pid));
      this.balancers.set(region, { process: child, writePort, readPort });
      await this.writesReachLeader(region);
    }
  }

  private readonly knownLinks = new Map<string, string>();

  /** The link `from` → `to` of `service`, made once: several users share it (HAProxy, brokers). */
  private async linkAddress(from: string, to: string, service: LinkService, port: number): Promise<string> {
    const key = `${from}>${to}>${service}`;
    let address = this.knownLinks.get(key);
    if (!address) {
      address = await this.links.link(`${from}`, to, service, port);
      this.knownLinks.set(key, address);
    }
    return address;
  }

  /**
   * Resolves once three connections in a row through `region`'s write frontend reach a primary: HAProxy
   * takes its servers as up until their first checks, so the first connections may reach a replica.
   */
  private async writesReachLeader(region: string): Promise<void> {
    const deadline = Date.now() + 20_000;
    let streak = 0;
    while (streak < 3) {
      const primary = await inRecovery(this.writeUrl(region)).then(
        (r) => !r,
        () => false,
      );
      streak = primary ? streak + 1 : 0;
      if (Date.now() > deadline)
        throw new Error(`region ${region}'s database HAProxy did not route writes to the leader in 20 s`);
      if (streak < 3) await new Promise((resolve) => setTimeout(resolve, CHECK_INTERVAL_MS / 2));
    }
  }

  member(region: string): PatroniMember {
    const member = this.members.get(region);
    if (!member) throw new Error(`no region "${region}"`);
    return member;
  }

  writeUrl(region: string): string {
    return `postgres://postgres@127.0.0.1:${this.balancers.get(region)!.writePort}/${DATABASE_NAME}`;
  }

  readUrl(region: string): string {
    return `postgres://postgres@127.0.0.1:${this.balancers.get(region)!.readPort}/${DATABASE_NAME}`;
  }

  /** Reads every member's view (its own REST API, directly); true when a role or timeline changed. */
  async refresh(): Promise<boolean> {
    const before = JSON.stringify([...this.views].map(([r, v]) => [r, v?.role, v?.state, v?.timeline]));
    for (const [region, member] of this.members)
      this.views.set(region, member.stopped ? undefined : await member.view());
    const leaders = [...this.views].filter(
      ([, v]) => (v?.role === 'master' || v?.role === 'primary') && v.state === 'running',
    );
    this.leader = leaders.length === 1 ? leaders[0]![0] : undefined;
    return before !== JSON.stringify([...this.views].map(([r, v]) => [r, v?.role, v?.state, v?.timeline]));
  }

  /** Crashes the leader's node (see PatroniMember.kill); returns its region. */
  killLeader(): string {
    const leader = this.leader;
    if (!leader) throw new Error('no region holds the leader key now: nothing to kill');
    this.member(leader).kill();
    this.views.set(leader, undefined);
    this.leader = undefined;
    return leader;
  }

  regionState(region: string): RegionDatabaseState {
    const member = this.member(region);
    const view = this.views.get(region);
    const balancer = this.balancers.get(region);
    const role = member.stopped
      ? 'stopped'
      : view?.role === 'master' || view?.role === 'primary'
        ? 'primary'
        : 'replica';
    return {
      postgres: { role, url: member.urlOf(DATABASE_NAME), dataDir: member.dataDir },
      patroni: { pid: member.pid, rest: `http://${member.restAddress}`, timeline: view?.timeline ?? null },
      pgLb: {
        pid: balancer?.process.pid ?? 0,
        writeUrl: balancer ? this.writeUrl(region) : '',
        readUrl: balancer ? this.readUrl(region) : '',
      },
    };
  }

  etcdState(): RegionsState['etcd'] {
    return { url: `http://${this.etcd.address}`, pid: this.etcd.pid, dataDir: this.etcd.dataDir };
  }

  /** Patroni's cluster view (GET /cluster of the first member that answers): members, roles, lag. */
  async status(): Promise<unknown> {
    for (const member of this.members.values()) {
      if (member.stopped) continue;
      const answer = await patroniGet(member.restAddress, '/cluster').catch(() => undefined);
      if (answer?.status === 200) return answer.body;
    }
    throw new Error('no Patroni REST API answers');
  }
}
