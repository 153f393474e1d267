import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { createGenerator } from 'ts-json-schema-generator';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { packageRoot } from '../../broker/paths.js';
import { localDynamicConfig, localStaticConfig } from '../../cli/cluster/traefik-local.js';

const root = packageRoot();
const types = (pkg: string) => join(root, 'node_modules', '@schemastore', pkg, 'index.d.ts');

/** The Traefik v3 JSON schemas, generated from the SchemaStore type packages (strict: no unknown keys). */
function schemaOf(pkg: string, type: string) {
  return createGenerator({
    path: types(pkg),
    type,
    skipTypeCheck: true,
    additionalProperties: false,
  }).createSchema(type);
}

let validateDynamic: ReturnType<Ajv['compile']>;
let validateStatic: ReturnType<Ajv['compile']>;

beforeAll(() => {
  const ajv = new Ajv({ allErrors: true, strict: false });
  validateDynamic = ajv.compile(
    schemaOf('traefik-v3-file-provider', 'HttpsJsonSchemastoreOrgTraefikV3FileProviderJson'),
  );
  validateStatic = ajv.compile(schemaOf('traefik-v3', 'TraefikV3StaticConfiguration'));
}, 60_000);

describe('Traefik files against the Traefik v3 schemas', () => {
  it.each([0, 1, 2, 3, 4])('phases/phase%i/traefik.yml is a valid dynamic configuration', (phase) => {
    const document = parse(readFileSync(join(root, 'phases', `phase${phase}`, 'traefik.yml'), 'utf8'));
    expect(validateDynamic(document), JSON.stringify(validateDynamic.errors)).toBe(true);
  });

  it('traefik/traefik.yml is a valid static configuration', () => {
    const document = parse(readFileSync(join(root, 'traefik', 'traefik.yml'), 'utf8'));
    expect(validateStatic(document), JSON.stringify(validateStatic.errors)).toBe(true);
  });

  it.each([0, 1, 2, 3, 4])(
    'phase %i: the local Traefik files (loopback servers, static config) are valid too',
    (phase) => {
      const addresses = Object.fromEntries(
        Array.from({ length: 6 }, (_, i) => [`broker-${i + 1}`, `127.0.0.1:${9100 + i}`]),
      );
      const phaseFile = readFileSync(join(root, 'phases', `phase${phase}`, 'traefik.yml'), 'utf8');
      const dynamic = parse(localDynamicConfig(phaseFile, addresses));
      expect(validateDynamic(dynamic), JSON.stringify(validateDynamic.errors)).toBe(true);
      const urls = Object.values(dynamic.http.services).flatMap(
        (service) =>
          (service as { loadBalancer?: { servers: Array<{ url: string }> } }).loadBalancer?.servers ?? [],
      );
      expect(urls.length).toBeGreaterThan(0);
      for (const { url } of urls) expect(url).toMatch(/^http:\/\/127\.0\.0\.1:91\d\d$/);
      const statics = parse(localStaticConfig({ bind: '127.0.0.1:8080', dynamicFile: '/tmp/d.yml' }));
      expect(validateStatic(statics), JSON.stringify(validateStatic.errors)).toBe(true);
    },
  );

  it('a server whose host has no local node is refused, naming the service', () => {
    const phaseFile = readFileSync(join(root, 'phases', 'phase0', 'traefik.yml'), 'utf8');
    expect(() => localDynamicConfig(phaseFile, {})).toThrow(
      /http\.services\.\w+: no local node for broker-1/,
    );
  });

  it('refuses a misspelt key (the check can fail)', () => {
    const document = parse(readFileSync(join(root, 'phases', 'phase0', 'traefik.yml'), 'utf8'));
    document.http.services.brokers.loadbalancer = document.http.services.brokers.loadBalancer;
    delete document.http.services.brokers.loadBalancer;
    expect(validateDynamic(document)).toBe(false);
  });
});
