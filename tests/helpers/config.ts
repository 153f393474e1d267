/** Loading the broker's configuration from a test's variables, as `workbench broker` does from its environment. */
import { ConfigError, loadConfig } from '../../broker/config.js';
import { TEST_BUS_SECRET } from './bus-secret.js';

/** The least a node starts with: every other variable has a default. */
export const MINIMAL_ENV = { ADMIN_TOKEN: 'a-long-enough-admin-token', BUS_SECRET: TEST_BUS_SECRET };

/** The configuration error `env` (on top of the minimal one) makes; throws if it is accepted. */
export function configErrorFor(env: Record<string, string>): ConfigError {
  try {
    loadConfig({ ...MINIMAL_ENV, ...env });
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('config was accepted');
}
