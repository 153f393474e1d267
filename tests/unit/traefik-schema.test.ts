import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { createGenerator } from 'ts-json-schema-generator';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { packageRoot } from '../../broker/paths.js';

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

  it('refuses a misspelt key (the check can fail)', () => {
    const document = parse(readFileSync(join(root, 'phases', 'phase0', 'traefik.yml'), 'utf8'));
    document.http.services.brokers.loadbalancer = document.http.services.brokers.loadBalancer;
    delete document.http.services.brokers.loadBalancer;
    expect(validateDynamic(document)).toBe(false);
  });
});
