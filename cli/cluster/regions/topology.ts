/**
 * The shape of phase 4's two-region simulation, before anything starts: the options (validated), the
 * regions and their load balancers as phases/phase4/traefik.yml draws them, and the settings of a region's
 * brokers (docs/multi-region.md § The simulated topology). Pure: no process, no socket.
 */
import { UsageError, wholeNumber } from '../../args.js';
import type { Service, TraefikConfig } from '../traefik.js';

export interface RegionOptions {
  /** Round trip between two regions; each link direction gets half. */
  rttMs: number;
  /** Extra one-way delay drawn per chunk from [0, jitterMs) (never reorders). */
  jitterMs: number;
  nodesPerRegion: number;
  /** Patroni's synchronous mode: commits wait for the other region's standby (zero acknowledged loss). */
  sync: boolean;
}

export const DEFAULT_REGION_OPTIONS: RegionOptions = {
  rttMs: 40,
  jitterMs: 2,
  nodesPerRegion: 2,
  sync: false,
};

/** Longer than any Earth-bound round trip worth simulating: a larger number is a unit mistake (seconds?). */
export const MAX_RTT_MS = 2000;
/** Two cores run every broker of both regions: more than this per region measures the machine. */
export const MAX_NODES_PER_REGION = 6;

/**
 * The options of `up --phase 4`, each checked before anything starts (exit 2 naming the bad one). The
 * jitter may not exceed the one-way delay: a link whose jitter dwarfs its delay is not the link asked for.
 */
export function parseRegionOptions(values: {
  rttMs?: string;
  jitterMs?: string;
  nodesPerRegion?: string;
  sync?: boolean;
}): RegionOptions {
  const rttMs =
    values.rttMs === undefined
      ? DEFAULT_REGION_OPTIONS.rttMs
      : wholeNumber('--rtt-ms', values.rttMs, 0, MAX_RTT_MS);
  const jitterMs =
    values.jitterMs === undefined
      ? Math.min(DEFAULT_REGION_OPTIONS.jitterMs, rttMs / 2)
      : wholeNumber('--jitter-ms', values.jitterMs, 0, MAX_RTT_MS / 2);
  if (jitterMs > rttMs / 2)
    throw new UsageError(
      `--jitter-ms (${jitterMs}) must not exceed the one-way delay (--rtt-ms ${rttMs} / 2 = ${rttMs / 2})`,
    );
  const nodesPerRegion =
    values.nodesPerRegion === undefined
      ? DEFAULT_REGION_OPTIONS.nodesPerRegion
      : wholeNumber('--nodes-per-region', values.nodesPerRegion, 1, MAX_NODES_PER_REGION);
  return { rttMs, jitterMs, nodesPerRegion, sync: values.sync === true };
}

type LoadBalancer = Extract<Service, { kind: 'loadBalancer' }>;

export interface RegionLayout {
  name: string;
  /** The weight of its share at the entry. */
  weight: number;
  /** Its load balancer's settings in the Traefik file (health check, sticky cookie). */
  lb: LoadBalancer;
  /** Its brokers' node ids: broker-a1, broker-a2, … */
  nodeIds: string[];
}

export interface Layout {
  /** The entry's router → its weighted service. */
  entryService: string;
  routers: TraefikConfig['routers'];
  /** In the file's order; the first holds the Postgres primary and the entry. */
  regions: RegionLayout[];
}

const REGION_SERVICE = /^region-([a-z0-9-]{1,32})$/;

/**
 * Reads the regions from the phase-4 Traefik file: its routers lead to one weighted service whose members
 * are `region-<name>` load balancers. The file's broker hosts are the compose sketch's (one machine, four
 * brokers); here each region gets `nodesPerRegion` brokers of its own behind its own load balancer.
 */
export function regionLayout(config: TraefikConfig, nodesPerRegion: number): Layout {
  const services = new Set(config.routers.map((r) => r.service));
  if (services.size !== 1)
    throw new Error(
      `phase 4's Traefik file must route to one weighted service, not ${[...services].join(', ')}`,
    );
  const entryService = [...services][0]!;
  const entry = config.services[entryService]!;
  if (entry.kind !== 'weighted')
    throw new Error(`http.services.${entryService}: phase 4's entry must be a weighted service`);
  const regions = entry.services.map(({ name, weight }) => {
    const match = REGION_SERVICE.exec(name);
    const lb = config.services[name];
    if (!match || lb?.kind !== 'loadBalancer')
      throw new Error(
        `http.services.${entryService}: member "${name}" must be a region-<name> load balancer`,
      );
    const region = match[1]!;
    const nodeIds = Array.from({ length: nodesPerRegion }, (_, i) => `broker-${region}${i + 1}`);
    return { name: region, weight, lb, nodeIds };
  });
  if (regions.length < 2) throw new Error(`phase 4's entry must weigh at least two regions`);
  return { entryService, routers: config.routers, regions };
}

/** One region's load balancer: the file's settings for it, its own brokers as servers. */
export function regionLbConfig(region: RegionLayout): TraefikConfig {
  const service = `region-${region.name}`;
  return {
    routers: [{ name: 'mesh', pathPrefix: '/', service, priority: 1 }],
    services: { [service]: { ...region.lb, servers: region.nodeIds.map((id) => `http://${id}:8080`) } },
  };
}

/**
 * The entry: the file's weighted service, each member now one server, the region's load balancer (host
 * `lb-<region>`), health-checked as the file says (a region whose load balancer answers no 200 within
 * the timeout, all its brokers down or the link cut, loses its share).
 */
export function entryConfig(layout: Layout): TraefikConfig {
  const services: Record<string, Service> = {
    [layout.entryService]: {
      kind: 'weighted',
      services: layout.regions.map((r) => ({ name: `region-${r.name}`, weight: r.weight })),
    },
  };
  for (const region of layout.regions)
    services[`region-${region.name}`] = { ...region.lb, servers: [`http://lb-${region.name}:8080`] };
  return { routers: layout.routers, services };
}

/** Where a broker of a region reaches each server: directly in its own region, else through a link. */
export interface RegionAddresses {
  /** The primary's database URL as this region reaches it. */
  primaryUrl: string;
  /** This region's replica (its own region), or the primary when it has none. */
  readUrl: string;
  /** This region's own Redis. */
  ownRedisUrl: string;
  /** The other regions' Redis, through the links. */
  remoteRedisUrls: string[];
  /** The Redis of the primary's region, as this region reaches it. */
  countersRedisUrl: string;
}

/**
 * The settings of a broker of `region` (docs/multi-region.md's table): its bus on its own region's Redis
 * (subscribe there, publish there and to every other region's through the links), the shared counters on
 * the primary region's Redis, writes to the primary and list reads on its own region's Postgres; the rest
 * it shares with all.
 */
export function regionBrokerEnv(
  region: string,
  primaryRegion: string,
  at: RegionAddresses,
): Record<string, string> {
  return {
    REGION: region,
    PRIMARY_REGION: primaryRegion,
    DATABASE_URL: at.primaryUrl,
    DATABASE_READ_URL: at.readUrl,
    REDIS_URL: at.ownRedisUrl,
    REDIS_REMOTE_URLS: at.remoteRedisUrls.join(','),
    REDIS_COUNTERS_URL: at.countersRedisUrl,
  };
}
