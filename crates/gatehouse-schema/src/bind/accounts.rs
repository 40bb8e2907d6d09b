//! `@account` and `@claim`: the type whose rows are the accounts that sign
//! in, the fields it is recognised by, and the fields tokens carry as
//! claims. See `docs/design/accounts.md`.

use apollo_compiler::Node;
use apollo_compiler::schema::ObjectType;

use super::Binder;
use crate::model::*;

/// What each recognised field of the account type must be: its GraphQL
/// type as written, and whether it must be `@unique`.
const RECOGNISED: &[(&str, &[&str], bool)] = &[
    (AccountType::USERNAME, &["String!"], true),
    (AccountType::EMAIL, &["String", "String!"], true),
    (AccountType::EMAIL_VERIFIED, &["Boolean!"], false),
    (AccountType::DISABLED, &["Boolean", "Boolean!"], false),
    (AccountType::DISPLAY_NAME, &["String", "String!"], false),
];

impl Binder<'_> {
    /// Marks the fields of an `@account` type that the server sets
    /// (`emailVerified`), before anything reads whether a field is
    /// writable (inputs, the scaffold).
    pub(super) fn mark_account_fields(&mut self, obj: &Node<ObjectType>, fields: &mut [Field]) {
        if obj.directives.get("account").is_none() {
            return;
        }
        for f in fields {
            if f.name == AccountType::EMAIL_VERIFIED && f.generated.is_none() {
                f.generated = Some(Generated::EmailVerified);
            }
        }
    }

    /// The account type, if one is declared: one at most, with a
    /// `username`, and each recognised field of its expected type.
    /// `@claim` anywhere else is an error.
    pub(super) fn bind_account(&mut self, objects: &[&Node<ObjectType>]) -> Option<AccountType> {
        let mut found: Option<(usize, &Node<ObjectType>)> = None;
        for (i, obj) in objects.iter().enumerate() {
            let Some(d) = obj.directives.get("account") else {
                self.refuse_claims_outside(obj);
                continue;
            };
            if let Some((_, first)) = found {
                self.error(
                    d.location(),
                    format!(
                        "`@account` on `{}`, but `{}` already is the account type",
                        obj.name, first.name
                    ),
                    Some("one type holds the accounts: remove `@account` from all but one".into()),
                );
                self.refuse_claims_outside(obj);
                continue;
            }
            found = Some((i, obj));
        }
        let (index, obj) = found?;
        let name = obj.name.as_str();
        let mut ok = true;
        for (field, types, unique) in RECOGNISED {
            let Some(def) = obj.fields.get(*field) else {
                if *field == AccountType::USERNAME {
                    ok = false;
                    self.error(
                        obj.location(),
                        format!("the account type `{name}` has no `username` field"),
                        Some("declare `username: String! @unique`: the name an account signs in with".into()),
                    );
                }
                continue;
            };
            let written = def.ty.to_string();
            let is_unique = def.directives.get("unique").is_some();
            if !types.contains(&written.as_str()) || (*unique && !is_unique) {
                ok = false;
                self.error(
                    def.location(),
                    format!(
                        "`{name}.{field}` of the account type is `{written}`{}",
                        if *unique && !is_unique {
                            " without `@unique`"
                        } else {
                            ""
                        }
                    ),
                    Some(format!(
                        "declare it `{field}: {}{}`: the server reads it when accounts sign in",
                        types[0],
                        if *unique { " @unique" } else { "" }
                    )),
                );
            }
        }
        if obj.fields.contains_key(AccountType::EMAIL_VERIFIED)
            && !obj.fields.contains_key(AccountType::EMAIL)
        {
            ok = false;
            self.error(
                obj.fields[AccountType::EMAIL_VERIFIED].location(),
                format!("`{name}.emailVerified` without an `email` field"),
                Some("declare `email: String @unique`, or remove `emailVerified`".into()),
            );
        }
        let claims = self.account_claims(index, obj);
        if obj.directives.get("policy").is_none() {
            self.warn(
                obj.location(),
                format!(
                    "the account type `{name}` has no `@policy`: every caller with its read scope reads every account"
                ),
                Some(format!(
                    "add `@policy(read: {{id: \"$sub\"}}, update: {{id: \"$sub\"}}, bypass: \"admin\")` to `{name}`"
                )),
            );
        }
        ok.then(|| AccountType {
            entity: EntityId::from_index(index),
            email: obj.fields.contains_key(AccountType::EMAIL),
            email_verified: obj.fields.contains_key(AccountType::EMAIL_VERIFIED),
            disabled: obj.fields.contains_key(AccountType::DISABLED),
            display_name: obj.fields.contains_key(AccountType::DISPLAY_NAME),
            claims,
        })
    }

    /// The `@claim` fields of the account type: stored values (no list,
    /// no relation), named as a custom claim may be, each name once.
    fn account_claims(&mut self, index: usize, obj: &Node<ObjectType>) -> Vec<AccountClaim> {
        let entity = obj.name.as_str();
        let mut claims: Vec<AccountClaim> = Vec::new();
        for def in obj.fields.values() {
            let Some(d) = def.directives.get("claim") else {
                continue;
            };
            let fname = def.name.as_str();
            let claim = d
                .specified_argument_by_name("name")
                .and_then(|v| v.as_str())
                .unwrap_or(fname)
                .to_string();
            let is_value = self.entities[index].field(fname).is_some_and(|f| {
                matches!(f.kind, FieldKind::Value { list: None, .. }) && !f.is_server_set()
            });
            if !is_value {
                self.error(
                    d.location(),
                    format!("`@claim` on `{entity}.{fname}`, which is not a single stored value"),
                    Some(
                        "a claim is a string, number, boolean or enum value of the account".into(),
                    ),
                );
                continue;
            }
            let problem = gatehouse_access::claim_name_problem(&claim).or_else(|| {
                gatehouse_access::PROFILE_CLAIMS
                    .contains(&claim.as_str())
                    .then(|| {
                        format!("the server fills the claim {claim:?} from the account's own field")
                    })
            });
            if let Some(problem) = problem {
                self.error(
                    d.location(),
                    format!("`@claim` on `{entity}.{fname}`: {problem}"),
                    Some(format!(
                        "name the claim otherwise: `@claim(name: \"{fname}_claim\")`"
                    )),
                );
                continue;
            }
            if claims.iter().any(|c| c.claim == claim) {
                self.error(
                    d.location(),
                    format!("`@claim` on `{entity}.{fname}`: another field already is the claim `{claim}`"),
                    Some("give one of them another name with `@claim(name:)`".into()),
                );
                continue;
            }
            claims.push(AccountClaim {
                claim,
                field: fname.to_string(),
            });
        }
        claims
    }

    /// `@claim` on a type that is not the account type.
    fn refuse_claims_outside(&mut self, obj: &Node<ObjectType>) {
        for def in obj.fields.values() {
            if let Some(d) = def.directives.get("claim") {
                self.error(
                    d.location(),
                    format!(
                        "`@claim` on `{}.{}`, which is not a field of the account type",
                        obj.name, def.name
                    ),
                    Some("tokens carry claims of the account that signs in: put `@claim` on a field of the `@account` type".into()),
                );
            }
        }
    }
}
