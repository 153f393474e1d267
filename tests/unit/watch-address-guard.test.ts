import type { LookupAddress } from 'node:dns';
import { describe, expect, it } from 'vitest';
import {
  BadTargetError,
  checkTarget,
  ForbiddenTargetError,
  guardedLookup,
  isPrivateAddress,
} from '../../broker/watches/address-guard.js';

interface LookupResult {
  error: NodeJS.ErrnoException | null;
  address: string | LookupAddress[];
  family: number | undefined;
}

/** Runs a lookup hook the way net.connect would, with or without `all`. */
function runLookup(allowPrivate: boolean, host: string, all: boolean): Promise<LookupResult> {
  return new Promise((resolve) => {
    guardedLookup(allowPrivate)(host, { all }, (error, address, family) =>
      resolve({ error, address, family }),
    );
  });
}

describe('isPrivateAddress', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['10.0.0.1', 'private'],
    ['10.255.255.255', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    ['169.254.169.254', 'link-local (cloud metadata)'],
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'unspecified block'],
    ['100.64.0.1', 'CGNAT'],
    ['100.127.255.255', 'CGNAT'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.250', 'multicast'],
    ['240.0.0.1', 'reserved'],
    ['255.255.255.255', 'broadcast'],
  ])('refuses IPv4 %s (%s)', (ip) => {
    expect(isPrivateAddress(ip)).toBe(true);
  });

  it.each([
    ['::1', 'loopback'],
    ['0:0:0:0:0:0:0:1', 'loopback, uncompressed'],
    ['::', 'unspecified'],
    ['fc00::1', 'unique local'],
    ['fd12:3456:789a::1', 'unique local'],
    ['fe80::1', 'link-local'],
    ['fe80::1%eth0', 'link-local with a zone'],
    ['febf:ffff::1', 'link-local upper edge'],
    ['ff02::1', 'multicast'],
    ['ff00::', 'multicast'],
  ])('refuses IPv6 %s (%s)', (ip) => {
    expect(isPrivateAddress(ip)).toBe(true);
  });

  it.each([
    ['::ffff:127.0.0.1', 'mapped loopback, dotted'],
    ['::ffff:7f00:1', 'mapped loopback, hex'],
    ['::ffff:10.1.2.3', 'mapped private'],
    ['::ffff:a9fe:a9fe', 'mapped link-local'],
    ['::ffff:192.168.0.1', 'mapped private'],
    ['::ffff:0.0.0.0', 'mapped unspecified'],
    ['::ffff:100.64.0.1', 'mapped CGNAT'],
    ['::ffff:224.0.0.1', 'mapped multicast'],
    ['0:0:0:0:0:ffff:7f00:0001', 'mapped loopback, uncompressed'],
    ['::127.0.0.1', 'IPv4-compatible loopback'],
    ['::7f00:1', 'IPv4-compatible loopback, hex'],
    ['::ffff:0:127.0.0.1', 'IPv4-translated loopback'],
    ['64:ff9b::7f00:1', 'NAT64 of loopback'],
    ['2002:7f00:1::', '6to4 of loopback'],
  ])('refuses IPv6 form %s (%s)', (ip) => {
    expect(isPrivateAddress(ip)).toBe(true);
  });

  it.each([
    '8.8.8.8',
    '1.1.1.1',
    '93.184.215.14',
    '172.15.255.255',
    '172.32.0.0',
    '100.63.255.255',
    '100.128.0.0',
    '169.253.255.255',
    '192.167.255.255',
    '223.255.255.255',
    '11.0.0.1',
    '2606:4700::1111',
    '2001:4860:4860::8888',
    '::ffff:8.8.8.8',
    '::ffff:808:808',
    '64:ff9b::808:808',
    '2002:808:808::1',
  ])('allows public %s', (ip) => {
    expect(isPrivateAddress(ip)).toBe(false);
  });

  it('fails closed on text that is not an IP address', () => {
    expect(isPrivateAddress('example.com')).toBe(true);
    expect(isPrivateAddress('')).toBe(true);
    expect(isPrivateAddress('[::1]')).toBe(true);
  });
});

describe('checkTarget', () => {
  it('accepts public literal addresses without resolving anything', async () => {
    const v4 = await checkTarget('http://8.8.8.8/path?q=1', { allowPrivate: false });
    expect(v4.href).toBe('http://8.8.8.8/path?q=1');
    const v6 = await checkTarget('https://[2606:4700::1111]:8443/', { allowPrivate: false });
    expect(v6.port).toBe('8443');
  });

  it.each([
    ['http://127.0.0.1:8080/admin', 'watch target 127.0.0.1 is a loopback address'],
    ['http://169.254.169.254/latest/meta-data', 'watch target 169.254.169.254 is a link-local address'],
    ['http://10.0.0.5/', 'is a private address'],
    ['http://[::1]/', 'watch target ::1 is a loopback address'],
    ['http://[::ffff:127.0.0.1]/', 'loopback address (IPv4-mapped 127.0.0.1)'],
    ['http://0x7f.1/', 'watch target 127.0.0.1 is a loopback address'],
    ['http://2130706433/', 'watch target 127.0.0.1 is a loopback address'],
  ])('refuses the private literal in %s', async (url, message) => {
    const attempt = checkTarget(url, { allowPrivate: false });
    await expect(attempt).rejects.toBeInstanceOf(ForbiddenTargetError);
    await expect(attempt).rejects.toThrow(message);
  });

  it('refuses a hostname that resolves to loopback', async () => {
    const attempt = checkTarget('http://localhost:3000/', { allowPrivate: false });
    await expect(attempt).rejects.toBeInstanceOf(ForbiddenTargetError);
    await expect(attempt).rejects.toThrow(
      /watch target localhost resolves to (127\.0\.0\.1|::1), which is a loopback/,
    );
  });

  it('allows private targets when the operator opts in', async () => {
    const local = await checkTarget('http://localhost:3000/x', { allowPrivate: true });
    expect(local.hostname).toBe('localhost');
    const literal = await checkTarget('http://127.0.0.1/', { allowPrivate: true });
    expect(literal.hostname).toBe('127.0.0.1');
  });

  it.each([
    ['ftp://example.com/file', 'scheme ftp: is not allowed'],
    ['file:///etc/passwd', 'scheme file: is not allowed'],
    ['gopher://8.8.8.8/', 'scheme gopher: is not allowed'],
    ['http://user:secret@8.8.8.8/', 'must not contain credentials'],
    ['http://user@8.8.8.8/', 'must not contain credentials'],
    ['not a url', 'is not a valid URL'],
    ['http://', 'is not a valid URL'],
    ['', 'is not a valid URL'],
  ])('rejects %s as a bad target', async (url, message) => {
    const attempt = checkTarget(url, { allowPrivate: true });
    await expect(attempt).rejects.toBeInstanceOf(BadTargetError);
    await expect(attempt).rejects.toThrow(message);
  });

  it('reports a host that does not resolve as a bad target', async () => {
    const attempt = checkTarget('http://no-such-host.invalid/', { allowPrivate: false });
    await expect(attempt).rejects.toBeInstanceOf(BadTargetError);
    await expect(attempt).rejects.toThrow('does not resolve');
  });

  it('names the error classes', () => {
    expect(new BadTargetError('x').name).toBe('BadTargetError');
    expect(new ForbiddenTargetError('h', '127.0.0.1', 'a loopback address').name).toBe(
      'ForbiddenTargetError',
    );
  });
});

describe('guardedLookup', () => {
  it('refuses a private resolution in the single-address form', async () => {
    const result = await runLookup(false, 'localhost', false);
    expect(result.error).toBeInstanceOf(ForbiddenTargetError);
    expect(result.error?.message).toMatch(/watch target localhost resolves to .*loopback/);
  });

  it('refuses a private resolution in the all-addresses form', async () => {
    const result = await runLookup(false, 'localhost', true);
    expect(result.error).toBeInstanceOf(ForbiddenTargetError);
    expect(result.address).toEqual([]);
  });

  it('passes a private resolution through when allowed, in both callback shapes', async () => {
    const single = await runLookup(true, 'localhost', false);
    expect(single.error).toBeNull();
    expect(typeof single.address).toBe('string');
    expect(isPrivateAddress(single.address as string)).toBe(true);
    expect([4, 6]).toContain(single.family);

    const all = await runLookup(true, 'localhost', true);
    expect(all.error).toBeNull();
    expect(Array.isArray(all.address)).toBe(true);
    const addresses = all.address as LookupAddress[];
    expect(addresses.length).toBeGreaterThan(0);
    expect(addresses[0]).toMatchObject({ family: expect.any(Number), address: expect.any(String) });
  });

  it('hands DNS failures to the callback', async () => {
    const result = await runLookup(false, 'no-such-host.invalid', false);
    expect(result.error).toBeInstanceOf(Error);
    expect(result.error).not.toBeInstanceOf(ForbiddenTargetError);
  });
});
