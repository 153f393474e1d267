import { describe, expect, it } from 'vitest';
import { CookieJar, MAX_COOKIE_BYTES, MAX_COOKIES } from '../../client/cookies.js';

const LB = 'ws://127.0.0.1:8080/ws';
const T0 = Date.parse('2026-12-03T00:00:00Z');

describe('the SDK cookie jar (client/cookies.ts)', () => {
  it("sends back HAProxy's sticky cookie on the next upgrade to the same host", () => {
    const jar = new CookieJar();
    expect(jar.header(LB, T0)).toBeUndefined();
    jar.store(LB, ['mesh_node=broker-2; path=/; HttpOnly; SameSite=Lax'], T0);
    expect(jar.header(LB, T0)).toBe('mesh_node=broker-2');
    expect(jar.header('ws://127.0.0.1:9999/ws', T0)).toBe('mesh_node=broker-2'); // cookies ignore ports
    expect(jar.header('ws://localhost:8080/ws', T0)).toBeUndefined(); // another host
  });

  it('a new value replaces the old one (re-pinned after its node died)', () => {
    const jar = new CookieJar();
    jar.store(LB, 'mesh_node=broker-1; path=/', T0);
    jar.store(LB, 'mesh_node=broker-3; path=/', T0);
    expect(jar.header(LB, T0)).toBe('mesh_node=broker-3');
    expect(jar.size).toBe(1);
  });

  it('honours Max-Age (over Expires), Expires, and deletion by Max-Age=0', () => {
    const jar = new CookieJar();
    jar.store(LB, 'a=1; Max-Age=10; Expires=Wed, 01 Jan 2099 00:00:00 GMT', T0);
    jar.store(LB, `b=2; Expires=${new Date(T0 + 5_000).toUTCString()}`, T0);
    expect(jar.header(LB, T0)).toBe('a=1; b=2');
    expect(jar.header(LB, T0 + 6_000)).toBe('a=1');
    expect(jar.header(LB, T0 + 11_000)).toBeUndefined();
    jar.store(LB, 'c=3', T0);
    jar.store(LB, 'c=; Max-Age=0', T0);
    expect(jar.header(LB, T0)).toBeUndefined();
  });

  it('scopes by path, Domain and Secure', () => {
    const jar = new CookieJar();
    jar.store('ws://mesh.example.com/ws/x', 'p=1', T0); // default path /ws
    jar.store('ws://mesh.example.com/ws', 'root=1; Path=/', T0);
    jar.store('ws://node.mesh.example.com/', 'd=1; Domain=.mesh.example.com', T0);
    jar.store('wss://mesh.example.com/', 's=1; Secure', T0);
    expect(jar.header('ws://mesh.example.com/ws', T0)).toBe('p=1; root=1; d=1');
    expect(jar.header('ws://mesh.example.com/other', T0)).toBe('root=1; d=1');
    expect(jar.header('ws://mesh.example.com/wsx', T0)).toBe('root=1; d=1');
    expect(jar.header('wss://mesh.example.com/', T0)).toBe('root=1; d=1; s=1');
    expect(jar.header('ws://other.example.com/', T0)).toBeUndefined();
  });

  it('ignores what is malformed, oversized or for another domain, and holds at most MAX_COOKIES', () => {
    const jar = new CookieJar();
    jar.store(LB, ['novalue', '=x', 'bad name=1', `big=${'x'.repeat(MAX_COOKIE_BYTES)}`], T0);
    jar.store(LB, 'evil=1; Domain=example.org', T0);
    expect(jar.size).toBe(0);
    for (let i = 0; i < MAX_COOKIES + 10; i++) jar.store(LB, `c${i}=${i}`, T0);
    expect(jar.size).toBe(MAX_COOKIES);
    expect(jar.header(LB, T0)).not.toContain('c0=');
    expect(jar.header(LB, T0)).toContain(`c${MAX_COOKIES + 9}=`);
  });
});
