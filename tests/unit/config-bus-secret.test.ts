/** BUS_SECRET and BUS_SECRET_PREVIOUS (issue 25, item 1): required, long enough, and never shown in an error. */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../broker/config.js';
import { configErrorFor, MINIMAL_ENV } from '../helpers/config.js';

const RETIRING = 'the-retiring-bus-secret-0123456789abcdef';

describe('BUS_SECRET', () => {
  it('is read with the retiring secret during a rotation, and without one otherwise', () => {
    const config = loadConfig({ ...MINIMAL_ENV, BUS_SECRET_PREVIOUS: RETIRING });
    expect(config.busSecret).toBe(MINIMAL_ENV.BUS_SECRET);
    expect(config.busSecretPrevious).toBe(RETIRING);
    expect(loadConfig({ ...MINIMAL_ENV, BUS_SECRET_PREVIOUS: '' }).busSecretPrevious).toBeUndefined();
  });

  it.each([
    [{ BUS_SECRET: '' }, 'BUS_SECRET', 'is required'],
    [{ BUS_SECRET: 'a'.repeat(31) }, 'BUS_SECRET', 'at least 32'],
    [{ BUS_SECRET_PREVIOUS: 'b'.repeat(31) }, 'BUS_SECRET_PREVIOUS', 'at least 32'],
    [{ BUS_SECRET_PREVIOUS: MINIMAL_ENV.BUS_SECRET }, 'BUS_SECRET_PREVIOUS', 'the same as BUS_SECRET'],
  ])('refuses %o naming %s, without showing the value', (env, variable, text) => {
    const error = configErrorFor(env);
    expect(error.variable).toBe(variable);
    expect(error.message).toContain(text);
    for (const value of Object.values(env)) if (value !== '') expect(error.message).not.toContain(value);
  });

  it('is required even with every ha.* row off: any of them can be switched on at run time', () => {
    const { BUS_SECRET: _, ...withoutSecret } = MINIMAL_ENV;
    expect(() => loadConfig(withoutSecret)).toThrow(/^BUS_SECRET: is required/);
  });
});
