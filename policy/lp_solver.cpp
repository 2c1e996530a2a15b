// GLPK behind LinearProgram; see lp_solver.h. The only file that includes
// glpk.h.
#include "policy/lp_solver.h"

#include <glpk.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace strata {

namespace {

// GLPK prints to the terminal unless told not to; the setting is per thread.
void silence_glpk() {
  static thread_local bool silenced = false;
  if (!silenced) {
    glp_term_out(GLP_OFF);
    silenced = true;
  }
}

}  // namespace

void LinearProgram::Deleter::operator()(glp_prob* p) const {
  glp_delete_prob(p);
}

LinearProgram::LinearProgram() {
  silence_glpk();
  prob_.reset(glp_create_prob());
  STRATA_ASSERT(prob_ != nullptr);
  glp_set_obj_dir(prob_.get(), GLP_MIN);
}

LinearProgram::~LinearProgram() = default;

int LinearProgram::add_var(double lo, double hi, const std::string& name) {
  STRATA_ASSERT(std::isfinite(lo) && !(hi < lo));
  const int j = glp_add_cols(prob_.get(), 1);
  if (!name.empty()) glp_set_col_name(prob_.get(), j, name.c_str());
  if (std::isinf(hi)) {
    glp_set_col_bnds(prob_.get(), j, GLP_LO, lo, 0.0);
  } else if (hi == lo) {
    glp_set_col_bnds(prob_.get(), j, GLP_FX, lo, lo);
  } else {
    glp_set_col_bnds(prob_.get(), j, GLP_DB, lo, hi);
  }
  n_vars_ = j;
  return j - 1;
}

void LinearProgram::fix_var(int var, double value) {
  STRATA_ASSERT(var >= 0 && var < n_vars_ && std::isfinite(value));
  glp_set_col_bnds(prob_.get(), var + 1, GLP_FX, value, value);
}

void LinearProgram::add_row(const Coeffs& row, int type, double lo, double hi) {
  STRATA_ASSERT(std::isfinite(lo) && std::isfinite(hi));
  const int i = glp_add_rows(prob_.get(), 1);
  std::vector<int> idx(1, 0);
  std::vector<double> val(1, 0.0);
  for (const auto& [var, c] : row) {
    STRATA_ASSERT(var >= 0 && var < n_vars_ && std::isfinite(c));
    if (c == 0) continue;
    idx.push_back(var + 1);
    val.push_back(c);
  }
  glp_set_mat_row(prob_.get(), i, static_cast<int>(idx.size()) - 1, idx.data(), val.data());
  glp_set_row_bnds(prob_.get(), i, type, lo, hi);
}

void LinearProgram::add_le(const Coeffs& row, double rhs) {
  add_row(row, GLP_UP, 0.0, rhs);
}
void LinearProgram::add_ge(const Coeffs& row, double rhs) {
  add_row(row, GLP_LO, rhs, 0.0);
}
void LinearProgram::add_eq(const Coeffs& row, double rhs) {
  add_row(row, GLP_FX, rhs, rhs);
}

void LinearProgram::minimize(const Coeffs& objective, double constant) {
  for (int j = 1; j <= n_vars_; ++j) glp_set_obj_coef(prob_.get(), j, 0.0);
  glp_set_obj_coef(prob_.get(), 0, constant);
  for (const auto& [var, c] : objective) {
    STRATA_ASSERT(var >= 0 && var < n_vars_ && std::isfinite(c));
    glp_set_obj_coef(prob_.get(), var + 1, glp_get_obj_coef(prob_.get(), var + 1) + c);
  }
}

LinearProgram::Status LinearProgram::solve() {
  silence_glpk();
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  parm.presolve = GLP_OFF;  // keep the basis for a later solve; the programs are tiny
  if (!solved_once_) {
    glp_scale_prob(prob_.get(), GLP_SF_AUTO);
    glp_adv_basis(prob_.get(), 0);
    solved_once_ = true;
  }
  // A warm-started simplex can cycle on a degenerate program; these programs
  // need tens of iterations, so a limit far above that ends a cycle.
  parm.it_lim = 100 * (glp_get_num_rows(prob_.get()) + glp_get_num_cols(prob_.get())) + 1000;
  int rc = glp_simplex(prob_.get(), &parm);
  if (rc != 0) {
    // A singular or ill-conditioned basis, or a cycle: start over from a
    // fresh one.
    glp_scale_prob(prob_.get(), GLP_SF_AUTO);
    glp_std_basis(prob_.get());
    rc = glp_simplex(prob_.get(), &parm);
    if (rc != 0) return Status::kFailed;
  }
  switch (glp_get_status(prob_.get())) {
    case GLP_OPT:
      return Status::kOptimal;
    case GLP_NOFEAS:
      return Status::kInfeasible;
    case GLP_UNBND:
      return Status::kUnbounded;
    default:
      return Status::kFailed;
  }
}

double LinearProgram::value(int var) const {
  STRATA_ASSERT(var >= 0 && var < n_vars_);
  return glp_get_col_prim(prob_.get(), var + 1);
}

double LinearProgram::objective() const {
  return glp_get_obj_val(prob_.get());
}

}  // namespace strata
