/**
 * The Unleash provider reads the shadow value from a flag's variant (docs/flags.md § Shadow): an enabled
 * flag whose variant is `shadow` is shadow (served locally, false in the values); a variant naming no
 * value is a reported error and the last good values stay. Against a stand-in of the client API on
 * loopback (the features document as unleash-server serves it), so the SDK's own variant evaluation runs.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UnleashFlagProvider } from '../../flags/provider.unleash.js';
import { defaultFlagValues } from '../../flags/registry.js';

let variant = 'shadow';
let server: Server;
let url: string;
let dir: string;

const feature = (name: string, variants: string[]) => ({
  name,
  enabled: true,
  strategies: [{ name: 'default', parameters: {}, constraints: [] }],
  variants: variants.map((v) => ({ name: v, weight: 1000, weightType: 'variable', stickiness: 'default' })),
});

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'wb-unleash-shadow-'));
  server = createServer((request, response) => {
    if (!request.url?.startsWith('/api/client/features')) {
      response.writeHead(404).end();
      return;
    }
    const body = { version: 2, features: [feature('ha.presence', [variant]), feature('ha.audit', [])] };
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

describe('the Unleash provider and shadow', () => {
  it('reads a "shadow" variant as shadow and refuses an unknown variant, keeping the last good values', async () => {
    const provider = new UnleashFlagProvider({
      url,
      token: undefined,
      environment: 'development',
      nodeId: 'n1',
      refreshMs: 60_000,
      backupDir: dir,
      bootstrap: defaultFlagValues(),
    });
    try {
      await provider.start();
      const good = provider.current();
      expect(good.error).toBeUndefined();
      expect(good.shadow).toEqual(['ha.presence']);
      expect(good.values['ha.presence']).toBe(false);
      expect(good.values['ha.audit']).toBe(true); // enabled, no variant: on

      variant = 'shadw';
      await provider.refresh();
      const bad = provider.current();
      expect(bad.status).toBe('error');
      expect(bad.error).toContain('flag "ha.presence" has variant "shadw"');
      expect(bad.values).toEqual(good.values);
      expect(bad.shadow).toEqual(['ha.presence']);
    } finally {
      await provider.close();
    }
  });
});
