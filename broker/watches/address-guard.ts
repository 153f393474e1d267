import dns, { type LookupAddress } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';

/**
 * SSRF protection for URL watches: the broker fetches URLs chosen by peers, so it must refuse to reach
 * loopback, private, link-local and other non-public addresses (the broker's own admin port, cloud
 * metadata services, the internal network) unless the operator explicitly allows it.
 */

/** The URL itself is unusable as a watch target (syntax, scheme, credentials, unresolvable host). */
export class BadTargetError extends Error {
  override name = 'BadTargetError';
}

/** The target resolves to an address the broker must not connect to. */
export class ForbiddenTargetError extends Error {
  override name = 'ForbiddenTargetError';

  constructor(
    readonly host: string,
    readonly address: string,
    readonly reason: string,
  ) {
    super(
      host === address
        ? `watch target ${address} is ${reason}`
        : `watch target ${host} resolves to ${address}, which is ${reason}`,
    );
  }
}

type Ipv4Range = readonly [base: string, prefix: number, reason: string];

/** Checked in order, so the more specific broadcast entry shadows the reserved 240/4 block. */
const IPV4_RANGES: readonly Ipv4Range[] = [
  ['0.0.0.0', 8, 'an unspecified address'],
  ['10.0.0.0', 8, 'a private address'],
  ['100.64.0.0', 10, 'a shared (CGNAT) address'],
  ['127.0.0.0', 8, 'a loopback address'],
  ['169.254.0.0', 16, 'a link-local address'],
  ['172.16.0.0', 12, 'a private address'],
  ['192.0.0.0', 24, 'a reserved address'],
  ['192.0.2.0', 24, 'a reserved (documentation) address'],
  ['192.168.0.0', 16, 'a private address'],
  ['198.18.0.0', 15, 'a reserved (benchmarking) address'],
  ['198.51.100.0', 24, 'a reserved (documentation) address'],
  ['203.0.113.0', 24, 'a reserved (documentation) address'],
  ['224.0.0.0', 4, 'a multicast address'],
  ['255.255.255.255', 32, 'a broadcast address'],
  ['240.0.0.0', 4, 'a reserved address'],
];

function ipv4ToNumber(ip: string): number {
  return ip.split('.').reduce((sum, octet) => sum * 256 + Number(octet), 0);
}

const IPV4_TABLE = IPV4_RANGES.map(([base, prefix, reason]) => {
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  return { network: (ipv4ToNumber(base) & mask) >>> 0, mask, reason };
});

function ipv4Reason(ip: string): string | undefined {
  const value = ipv4ToNumber(ip);
  return IPV4_TABLE.find((range) => (value & range.mask) >>> 0 === range.network)?.reason;
}

/** Expands any valid IPv6 text (compressed, with a dotted IPv4 tail) into its 16 bytes. */
function ipv6Bytes(ip: string): number[] {
  let text = ip;
  const lastColon = text.lastIndexOf(':');
  const tail = text.slice(lastColon + 1);
  if (tail.includes('.')) {
    const [a = 0, b = 0, c = 0, d = 0] = tail.split('.').map(Number);
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const halves = text.split('::');
  const head = halves[0] ? halves[0].split(':') : [];
  const rest = halves[1] ? halves[1].split(':') : [];
  const groups =
    halves.length === 2
      ? [...head, ...Array<string>(8 - head.length - rest.length).fill('0'), ...rest]
      : head;
  return groups.flatMap((group) => {
    const value = Number.parseInt(group, 16);
    return [value >> 8, value & 0xff];
  });
}

function embeddedIpv4(bytes: number[], offset: number): string {
  return bytes.slice(offset, offset + 4).join('.');
}

function allZero(bytes: number[], from: number, to: number): boolean {
  return bytes.slice(from, to).every((byte) => byte === 0);
}

/** IPv6 forms that carry an IPv4 address are judged by that address, so ::ffff:7f00:1 is loopback. */
function viaIpv4(bytes: number[], offset: number, label: string): string | undefined {
  const ipv4 = embeddedIpv4(bytes, offset);
  const reason = ipv4Reason(ipv4);
  return reason === undefined ? undefined : `${reason} (${label} ${ipv4})`;
}

function ipv6Reason(ip: string): string | undefined {
  const bytes = ipv6Bytes(ip);
  const [b0 = 0, b1 = 0, b2 = 0, b3 = 0] = bytes;
  if (allZero(bytes, 0, 16)) return 'an unspecified address';
  if (allZero(bytes, 0, 15) && bytes[15] === 1) return 'a loopback address';
  if (allZero(bytes, 0, 10) && bytes[10] === 0xff && bytes[11] === 0xff) {
    return viaIpv4(bytes, 12, 'IPv4-mapped');
  }
  if (allZero(bytes, 0, 12)) return viaIpv4(bytes, 12, 'IPv4-compatible');
  if (allZero(bytes, 0, 8) && bytes[8] === 0xff && bytes[9] === 0xff && allZero(bytes, 10, 12)) {
    return viaIpv4(bytes, 12, 'IPv4-translated');
  }
  if (b0 === 0x00 && b1 === 0x64 && b2 === 0xff && b3 === 0x9b) {
    if (allZero(bytes, 4, 12)) return viaIpv4(bytes, 12, 'NAT64');
    if (bytes[4] === 0 && bytes[5] === 1) return 'a private (local-use NAT64) address';
  }
  if (b0 === 0x20 && b1 === 0x02) return viaIpv4(bytes, 2, '6to4');
  if (b0 === 0x01 && b1 === 0x00 && allZero(bytes, 2, 8)) return 'a reserved (discard-only) address';
  if (b0 === 0x20 && b1 === 0x01 && b2 === 0x0d && b3 === 0xb8) return 'a reserved (documentation) address';
  if ((b0 & 0xfe) === 0xfc) return 'a private (unique local) address';
  if (b0 === 0xfe && (b1 & 0xc0) === 0x80) return 'a link-local address';
  if (b0 === 0xfe && (b1 & 0xc0) === 0xc0) return 'a private (site-local) address';
  if (b0 === 0xff) return 'a multicast address';
  return undefined;
}

/** Why an address must not be fetched, or undefined for a public one. Non-addresses fail closed. */
function privateReason(ip: string): string | undefined {
  const address = ip.split('%')[0] ?? ''; // an IPv6 zone index does not change the address class
  const version = isIP(address);
  if (version === 4) return ipv4Reason(address);
  if (version === 6) return ipv6Reason(address);
  return 'not an IP address';
}

/** True for addresses a watch must never connect to (loopback, private, link-local, reserved, …). */
export function isPrivateAddress(ip: string): boolean {
  return privateReason(ip) !== undefined;
}

function refusal(host: string, address: string): ForbiddenTargetError | undefined {
  const reason = privateReason(address);
  return reason === undefined ? undefined : new ForbiddenTargetError(host, address, reason);
}

function refuseIfPrivate(host: string, address: string): void {
  const error = refusal(host, address);
  if (error) throw error;
}

/** The URL's host without IPv6 brackets, as DNS and `isIP` expect it. */
function bareHostname(target: URL): string {
  return target.hostname.replace(/^\[(.*)\]$/, '$1');
}

/** Syntax-only checks: a well-formed http(s) URL without credentials (they would leak into logs). */
export function parseTarget(url: string): URL {
  let target: URL;
  try {
    target = new URL(url);
  } catch {
    throw new BadTargetError('watch target is not a valid URL');
  }
  if (target.protocol !== 'http:' && target.protocol !== 'https:') {
    throw new BadTargetError(`watch target scheme ${target.protocol} is not allowed (only http: and https:)`);
  }
  if (target.username !== '' || target.password !== '') {
    throw new BadTargetError('watch target must not contain credentials');
  }
  if (bareHostname(target) === '') throw new BadTargetError('watch target has no host');
  return target;
}

/**
 * Refuses a literal private IP host. Needed before connecting because Node skips the `lookup` hook
 * (and so `guardedLookup`) when the host is already an IP address.
 */
export function assertLiteralAllowed(target: URL, allowPrivate: boolean): void {
  const host = bareHostname(target);
  if (!allowPrivate && isIP(host) !== 0) refuseIfPrivate(host, host);
}

/**
 * Validates a watch URL when it is created: syntax, scheme, and every address its host resolves to.
 * With allowPrivate the host is not resolved at all, since no address would be refused.
 */
export async function checkTarget(url: string, options: { allowPrivate: boolean }): Promise<URL> {
  const target = parseTarget(url);
  const host = bareHostname(target);
  if (options.allowPrivate) return target;
  if (isIP(host) !== 0) {
    refuseIfPrivate(host, host);
    return target;
  }
  let addresses: LookupAddress[];
  try {
    addresses = await dns.promises.lookup(host, { all: true });
  } catch (error) {
    throw new BadTargetError(`watch target host ${host} does not resolve`, { cause: error });
  }
  if (addresses.length === 0) throw new BadTargetError(`watch target host ${host} does not resolve`);
  for (const { address } of addresses) refuseIfPrivate(host, address);
  return target;
}

/**
 * A `lookup` for http(s).request that refuses private addresses at connect time. Checking again here,
 * on the addresses actually used, defeats DNS rebinding between `checkTarget` and the fetch.
 */
export function guardedLookup(allowPrivate: boolean): LookupFunction {
  return (hostname, options, callback) => {
    dns.lookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) {
        callback(error, options.all ? [] : '');
        return;
      }
      const first = addresses[0];
      if (first === undefined) {
        const notFound: NodeJS.ErrnoException = new Error(`getaddrinfo ENOTFOUND ${hostname}`);
        notFound.code = 'ENOTFOUND';
        callback(notFound, options.all ? [] : '');
        return;
      }
      const refused = allowPrivate
        ? undefined
        : addresses.map(({ address }) => refusal(hostname, address)).find((error) => error !== undefined);
      if (refused) {
        callback(refused, options.all ? [] : '');
        return;
      }
      if (options.all) callback(null, addresses);
      else callback(null, first.address, first.family);
    });
  };
}
